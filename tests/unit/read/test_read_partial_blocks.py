"""A range that starts or ends inside a block (a spread span, specs/partition.md P21): the same
samples as a whole-block read, a row block decompressed only as far as the range reaches, and
the decompressor's prefix mode and the index's block placement check (I3, I7) still refuse
what they refused before."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import CorruptShardError
from shardkit.format.block_codec import CODEC_ZSTD, BlockCompressor, BlockDecompressor, CompressOptions
from shardkit.format.checksum import xxh64_int
from shardkit.format.shard_layout import BLOCK_DTYPE, HEADER_SIZE, decode_index, encode_index
from shardkit.read import ReadOptions, open_dataset
from shardkit.read.column_pieces import as_samples
from shardkit.read.shard_reader import ShardReader
from shardkit.read.sources import open_source
from tests.helpers.samples import assert_value_equal


def write(folder: str, count: int, layout: str, compression: str, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    if layout == "auto":  # uniform small samples: the writer makes column blocks
        items = [{"id": i, "x": rng.integers(0, 9, size=4, dtype=np.int32)} for i in range(count)]
    else:
        items = [{"id": i, "b": rng.bytes(int(rng.integers(0, 300))) * 3} for i in range(count)]
    with sk.ShardWriter(folder, block_size=700, compression=compression, layout=layout) as writer:
        for item in items:
            writer.write(item)
    return items


def open_reader(folder: str, views: bool, read_ahead: bool) -> ShardReader:
    dataset = open_dataset(folder)
    info = dataset.manifest.shards[0]
    source = open_source(dataset.store, info.name, info.num_bytes)
    return ShardReader(source, info, options=ReadOptions(read_ahead=read_ahead, views=views))


@settings(max_examples=30, deadline=None)
@given(layout=st.sampled_from(["rows", "auto"]), compression=st.sampled_from(["zstd", "none"]),
       views=st.booleans(), read_ahead=st.booleans(), seed=st.integers(0, 5),
       ranges=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1, max_size=6))
def test_a_range_inside_blocks_reads_the_samples_of_a_whole_block_read(
        tmp_path_factory, layout, compression, views, read_ahead, seed, ranges):
    """P21: samples ``start:stop`` are those of the whole shard, sliced, whatever the layout,
    codec, views and read-ahead."""
    folder = str(tmp_path_factory.mktemp("shard"))
    items = write(folder, 60, layout, compression, seed)
    with open_reader(folder, views, read_ahead) as reader:
        assert reader.num_blocks > 3
        assert (reader.index.blocks["layout"] == (1 if layout == "auto" else 0)).all()
        for start, stop in ranges:
            got = [s for chunk in reader.sample_chunks(start, stop) for s in as_samples(chunk, views)]
            want = items[start:stop]
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert_value_equal({k: bytes(v) if isinstance(v, memoryview) else v for k, v in g.items()}, w)


@pytest.mark.parametrize("read_ahead", [False, True])
def test_a_range_ending_inside_a_zstd_row_block_decompresses_only_its_prefix(tmp_path, read_ahead):
    """P21: a row block is decompressed up to the end of the last sample asked for (the reader's
    ``raw_bytes`` counts what was decompressed), with and without the read-ahead thread."""
    write(str(tmp_path), 60, "rows", "zstd", 1)
    with open_reader(str(tmp_path), views=True, read_ahead=read_ahead) as reader:
        index = reader.index
        assert (index.blocks["codec"] == CODEC_ZSTD).all() and reader.num_blocks > 3
        first = int(index.first_sample[1])
        stop = first + 1  # blocks 0 and 1, block 1 only its first sample
        chunks = list(reader.sample_chunks(1, stop))
        assert [s["id"] for chunk in chunks for s in chunk] == list(range(1, stop))
        prefix = int(index.offsets_of(1)[1])
        assert prefix < int(index.blocks[1]["raw_size"])
        assert reader.stats.raw_bytes == int(index.blocks[0]["raw_size"]) + prefix


def test_the_decompressor_returns_exactly_the_prefix_asked_for():
    """I7 holds for a prefix: the frame must declare the index's size; a frame that ends early is
    corrupt; a prefix beyond the block is the whole block."""
    raw = bytes(np.random.default_rng(0).integers(0, 4, 300_000, dtype=np.uint8))
    codec, stored = BlockCompressor(CompressOptions("zstd")).compress(raw)
    assert codec == CODEC_ZSTD
    decompressor = BlockDecompressor()
    for prefix in (0, 1, 4096, 131_073, len(raw) - 1, len(raw), len(raw) + 5):
        assert bytes(decompressor.decompress(CODEC_ZSTD, stored, len(raw), prefix)) == raw[:prefix]
    with pytest.raises(CorruptShardError, match="declares 300000 bytes, index says 299999"):
        decompressor.decompress(CODEC_ZSTD, stored, len(raw) - 1, 10)
    with pytest.raises(CorruptShardError):
        decompressor.decompress(CODEC_ZSTD, stored[: len(stored) // 2], len(raw), len(raw) - 1)


def test_a_misplaced_block_in_an_index_is_refused_naming_it():
    """I3: blocks are contiguous from the header to the index (the check is vectorised)."""
    blocks = np.zeros(3, dtype=BLOCK_DTYPE)
    blocks["stored_size"] = [10, 20, 30]
    blocks["raw_size"] = [10, 20, 30]
    blocks["num_samples"] = 1
    blocks["offset"] = [HEADER_SIZE, HEADER_SIZE + 10, HEADER_SIZE + 30]
    offsets = np.array([0, 10, 0, 20, 0, 30], dtype="<u4")

    def decode(blocks: np.ndarray, end: int) -> None:
        index = encode_index(blocks, offsets)
        decode_index(index, xxh64_int(index), end, "s.sks")

    decode(blocks, HEADER_SIZE + 60)
    with pytest.raises(CorruptShardError, match="blocks end at .*, index starts at"):
        decode(blocks, HEADER_SIZE + 61)
    blocks["offset"][2] += 1
    with pytest.raises(CorruptShardError, match=f"block 2 at offset {HEADER_SIZE + 31}, expected {HEADER_SIZE + 30}"):
        decode(blocks, HEADER_SIZE + 60)


@settings(max_examples=30, deadline=None)
@given(shape=st.sampled_from([("auto", "zstd"), ("auto", "none"), ("rows", "none")]), views=st.booleans(),
       read_ahead=st.booleans(), seed=st.integers(0, 5), cuts=st.lists(st.integers(1, 59), max_size=12))
def test_consecutive_ranges_read_each_block_once(tmp_path_factory, shape, views, read_ahead, seed, cuts):
    """P21: a run that stops inside a block keeps it, so the next run of the shard (a mixture's
    next window of the same source, a spread consumer's next span) starting there neither reads,
    checks nor parses it again: consecutive ranges read each block once (a zstd row block, only
    decompressed as far as a range reaches, is not kept) and yield the shard's samples."""
    folder = str(tmp_path_factory.mktemp("shard"))
    items = write(folder, 60, *shape, seed)
    bounds = [0, *sorted(set(cuts)), 60]
    with open_reader(folder, views, read_ahead) as reader:
        got = [s for start, stop in zip(bounds, bounds[1:], strict=False)
               for chunk in reader.sample_chunks(start, stop) for s in as_samples(chunk, views)]
        assert reader.stats.blocks == reader.num_blocks > 3
    assert len(got) == len(items)
    for g, w in zip(got, items, strict=True):
        assert_value_equal({k: bytes(v) if isinstance(v, memoryview) else v for k, v in g.items()}, w)
