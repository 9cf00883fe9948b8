"""Writer → reader round trips of arbitrary samples (specs/shard-format.md I1–I9, G1)."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.read import open_dataset
from shardkit.read.verify import verify_dataset
from tests.helpers.samples import assert_value_equal, samples

sizes = st.sampled_from([1, 40, 300, 4096, 1 << 20])
compressions = st.sampled_from(["auto", "zstd", "none"])


def write(
    folder: str, items: list[dict], block_size: int, shard_size: int, compression: str
) -> None:
    with sk.ShardWriter(
        folder, shard_size=shard_size, block_size=block_size, compression=compression
    ) as w:
        for sample in items:
            w.write(sample)


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(samples, min_size=1, max_size=25),
    block=sizes,
    shard=sizes,
    compression=compressions,
)
def test_any_samples_round_trip_with_dtype_and_shape(items, block, shard, compression):
    """G1, I1–I9: what is written reads back equal (type, dtype, shape, bytes), in order, by
    iteration, by random access and by windows; the dataset verifies (schema included)."""
    with tempfile.TemporaryDirectory() as folder:
        write(folder, items, block, shard, compression)
        dataset = open_dataset(folder)
        assert dataset.manifest.num_samples == len(items)
        got = list(dataset.samples())
        assert len(got) == len(items)
        for i, (g, want) in enumerate(zip(got, items, strict=True)):
            assert_value_equal(g, want, f"sample {i}")
        assert verify_dataset(dataset).ok
        base = 0
        for shard_index, info in enumerate(dataset.manifest.shards):
            with dataset.open_shard(shard_index) as reader:
                iterated = list(reader)
                for i in range(len(reader)):
                    assert_value_equal(reader[i], iterated[i], f"{info.name}[{i}]")
                    assert_value_equal(reader[i], items[base + i], f"{info.name}[{i}]")
                n = len(reader)
                with dataset.open_shard(shard_index, read_ahead=True) as ahead:
                    assert ahead.read_ahead  # a local file: the read-ahead thread is used
                    for start, stop in ((0, n), (1, n - 1), (n // 2, n), (n - 1, n + 5), (3, 2)):
                        want = iterated[max(start, 0) : max(min(stop, n), 0)]
                        for source in (reader, ahead):
                            window = list(source.samples(start, stop))
                            assert len(window) == len(want)
                            for g, w in zip(window, want, strict=True):
                                assert_value_equal(g, w)
            base += info.num_samples


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 600), min_size=1, max_size=40),
    block=st.integers(1, 2000),
    shard=st.integers(1, 6000),
)
def test_shard_size_bounds_uncompressed_bytes(lengths, block, shard):
    """I10: a block's raw bytes stay under block_size + one sample, a shard's under shard_size
    + one block; every shard but the last reaches shard_size."""
    items = [{"x": b"\x00" * n} for n in lengths]
    with tempfile.TemporaryDirectory() as folder:
        write(folder, items, block, shard, "auto")
        dataset = open_dataset(folder)
        largest = max(lengths) + 16
        for i, info in enumerate(dataset.manifest.shards):
            assert info.raw_bytes < shard + block + largest
            if i < len(dataset.manifest.shards) - 1:
                assert info.raw_bytes >= shard
            with dataset.open_shard(i) as reader:
                for raw_size in reader.index.blocks["raw_size"]:
                    assert int(raw_size) < block + largest
