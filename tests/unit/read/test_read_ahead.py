"""The read-ahead thread of ``ShardReader`` (checks and decompresses block k+1 while block k is
unpacked): same samples, same errors at the same place (specs/shard-format.md I5), and it never
outlives the iteration that started it."""

from __future__ import annotations

import numpy as np
import pytest

import shardkit as sk
from shardkit.errors import CorruptShardError
from shardkit.read import open_dataset


def write_tokens(folder: str, count: int = 200) -> None:
    rng = np.random.default_rng(5)
    with sk.ShardWriter(folder, block_size=2048, compression="zstd") as writer:
        for i in range(count):
            writer.write({"id": i, "tokens": rng.integers(0, 50, size=int(rng.integers(1, 200)), dtype=np.int32)})


def test_read_ahead_yields_the_same_chunks(tmp_path) -> None:
    write_tokens(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    with dataset.open_shard(0) as plain, dataset.open_shard(0, read_ahead=True) as ahead:
        assert ahead.read_ahead and ahead.num_blocks > 5
        for start, stop in ((0, None), (7, 150), (199, 200)):
            want = [[s["id"] for s in chunk] for chunk in plain.sample_chunks(start, stop)]
            got = [[s["id"] for s in chunk] for chunk in ahead.sample_chunks(start, stop)]
            assert got == want


def test_a_corrupt_block_read_ahead_fails_where_it_is_consumed(tmp_path) -> None:
    """Blocks before the damaged one arrive intact; the error names the damaged block (I5)."""
    write_tokens(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    info = dataset.manifest.shards[0]
    with dataset.open_shard(0) as reader:
        block = reader.index.blocks[3]
        first_bad = int(reader.index.first_sample[3])
    path = tmp_path / info.name  # names are relative to the manifest
    data = bytearray(path.read_bytes())
    data[int(block["offset"]) + int(block["stored_size"]) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    seen: list[int] = []
    with dataset.open_shard(0, read_ahead=True) as ahead:
        with pytest.raises(CorruptShardError, match=r"block 3 .*checksum mismatch"):
            for chunk in ahead.sample_chunks():
                seen += [s["id"] for s in chunk]
    assert seen == list(range(first_bad))


def test_stopping_early_leaves_the_reader_usable(tmp_path) -> None:
    write_tokens(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    with dataset.open_shard(0, read_ahead=True) as ahead:
        chunks = ahead.sample_chunks()
        first = next(chunks)
        chunks.close()  # the pending read-ahead is finished or cancelled here
        again = next(ahead.sample_chunks())
        assert [s["id"] for s in again] == [s["id"] for s in first]
