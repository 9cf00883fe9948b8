"""Determinism (W1): the same samples give byte-identical shards, manifest and fingerprint;
shards streamed to their file block by block are the bytes ``build_shard`` makes in memory;
W2: nothing of an interrupted write stays behind."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.format.shard_builder import SealedBlock, build_shard
from shardkit.read import open_dataset
from tests.helpers.files import read_tree


def _samples():
    rng = np.random.default_rng(7)
    for i in range(400):
        yield {
            "id": i,
            "tokens": rng.integers(0, 50_000, size=int(rng.integers(1, 200)), dtype=np.int32),
            "jpg": rng.bytes(int(rng.integers(10, 600))),  # incompressible
            "text": "lorem ipsum " * (i % 9),
            "score": np.float32(i / 7),
        }


def _write(folder: str, **kw) -> None:
    with sk.ShardWriter(
        folder, shard_size="64KiB", block_size="8KiB", metadata={"k": 1}, **kw
    ) as w:
        for sample in _samples():
            w.write(sample)




@pytest.mark.parametrize("compression", ["auto", "zstd", "none"])
def test_same_samples_same_bytes(tmp_path, compression):
    _write(str(tmp_path / "a"), compression=compression)
    _write(str(tmp_path / "b"), compression=compression)
    a, b = read_tree(tmp_path / "a"), read_tree(tmp_path / "b")
    assert len(a) > 3 and a == b
    fa, fb = (open_dataset(str(tmp_path / x)).manifest.fingerprint for x in "ab")
    assert fa == fb and fa.startswith("xxh3-128:")


def test_fingerprint_changes_with_any_byte(tmp_path):
    _write(str(tmp_path / "a"))
    with sk.ShardWriter(
        str(tmp_path / "b"), shard_size="64KiB", block_size="8KiB", metadata={"k": 1}
    ) as w:
        for i, sample in enumerate(_samples()):
            if i == 399:
                sample["id"] = -1
            w.write(sample)
    fa, fb = (open_dataset(str(tmp_path / x)).manifest.fingerprint for x in "ab")
    assert fa != fb


def test_auto_mixes_raw_and_zstd_blocks(tmp_path):
    """C1: incompressible blocks raw (codec 0), compressible ones zstd (codec 1)."""
    folder = str(tmp_path / "ds")
    with sk.ShardWriter(folder, block_size="16KiB") as w:
        for i in range(8):
            noise = np.random.default_rng(i).bytes(20_000)
            w.write({"jpg": noise} if i % 2 else {"text": "abc " * 5000})
    with open_dataset(folder).open_shard(0) as reader:
        assert list(reader.index.blocks["codec"]) == [1, 0] * 4


def test_writer_exception_leaves_no_manifest(tmp_path):
    """W2: an exception inside ``with`` publishes nothing and removes written shards."""
    folder = str(tmp_path / "ds")
    with pytest.raises(RuntimeError):
        with sk.ShardWriter(folder, shard_size=1, block_size=1) as w:
            for sample in _samples():
                w.write(sample)
                if sample["id"] == 50:
                    raise RuntimeError("boom")
    assert not os.path.exists(os.path.join(folder, "manifest.json"))
    assert not [n for n in os.listdir(os.path.join(folder, "shards")) if n.endswith(".sks")]


def test_writer_exception_mid_shard_leaves_no_file(tmp_path):
    """W2: the shard being streamed when the exception comes (a temp file) goes too, and so
    do the shards already published."""
    folder = str(tmp_path / "ds")
    with pytest.raises(RuntimeError):
        with sk.ShardWriter(folder, shard_size="16KiB", block_size="1KiB") as w:
            for sample in _samples():
                w.write(sample)
                if sample["id"] >= 150 and w._shard is not None:  # a shard is half-written
                    assert len(w.shards) >= 2
                    raise RuntimeError("boom")
    assert os.listdir(os.path.join(folder, "shards")) == []
    assert not os.path.exists(os.path.join(folder, "manifest.json"))


def _stored_blocks(reader) -> list[SealedBlock]:
    index, blocks = reader.index, []
    for b, record in enumerate(index.blocks):
        start = int(record["offset"])
        stored = bytes(reader.source.read_range(start, start + int(record["stored_size"])))
        offsets = np.asarray(index.offsets_of(b), dtype="<u4")
        codec, raw_size, layout = int(record["codec"]), int(record["raw_size"]), int(record["layout"])
        blocks.append(SealedBlock(codec, stored, raw_size, offsets, layout))
    return blocks


@settings(max_examples=25, deadline=None)
@given(
    count=st.integers(0, 120),
    block=st.sampled_from([1, 700, 8 << 10]),
    shard=st.sampled_from([1, 20 << 10, 1 << 20]),
)
def test_streamed_shards_are_the_bytes_build_shard_makes(tmp_path_factory, count, block, shard):
    """Blocks appended to the file as they are compressed (in order, any number in flight) give
    the same file as assembling the shard in memory from the same blocks."""
    folder = str(tmp_path_factory.mktemp("ds"))
    with sk.ShardWriter(folder, shard_size=shard, block_size=block) as w:
        for sample, _ in zip(_samples(), range(count), strict=False):
            w.write(sample)
    dataset = open_dataset(folder)
    assert sum(s.num_samples for s in dataset.manifest.shards) == count
    for i, info in enumerate(dataset.manifest.shards):
        with dataset.open_shard(i) as reader:
            data, rebuilt = build_shard(info.name, _stored_blocks(reader))
        with open(os.path.join(folder, info.name), "rb") as fh:
            assert fh.read() == data
        assert rebuilt == info


def test_a_shard_is_never_held_whole_in_memory(tmp_path):
    """Writing a 40 MiB shard of incompressible 1 MiB blocks allocates far less than the shard
    (blocks go to the file as they are compressed; at most a few are in memory)."""
    rng = np.random.default_rng(3)
    payloads = [rng.bytes(256 << 10) for _ in range(8)]
    tracemalloc.start()
    try:
        with sk.ShardWriter(str(tmp_path / "ds"), shard_size="64MiB", block_size="1MiB") as w:
            for i in range(160):
                w.write({"id": i, "jpg": payloads[i % 8]})
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert os.path.getsize(tmp_path / "ds" / "shards" / "shard-000000.sks") > 40 << 20
    assert peak < 20 << 20, f"peak {peak >> 20} MiB"


def test_overwrite_removes_stale_shards(tmp_path):
    folder = str(tmp_path / "ds")
    _write(folder)
    with pytest.raises(FileExistsError, match="overwrite"):
        sk.ShardWriter(folder)
    with sk.ShardWriter(folder, overwrite=True) as w:
        w.write({"x": 1})
    assert sorted(read_tree(folder)) == ["manifest.json", "shards/shard-000000.sks"]
    assert list(open_dataset(folder).samples()) == [{"x": 1}]
