"""Readers and writers against the format's bounds (specs/shard-format.md I12, S3, I14, I13):
the block limit refused before a block is read, configurable per reader and by environment;
no writer ever makes a block above it; a non-regular file in a shard's place refused without
blocking; verify's one pass over a shard feeding its checksum from the block reads."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import CorruptShardError, EncodeError, StorageError
from shardkit.read import ShardReader, open_dataset
from shardkit.read.sources import LocalFileSource
from shardkit.read.verify import ByteBudget, verify_dataset, verify_shard

SHARD0 = "shards/shard-000000.sks"


@pytest.fixture
def dataset(tmp_path) -> str:
    folder = str(tmp_path / "ds")
    with sk.ShardWriter(folder, shard_size=4000, block_size=1000, compression="none") as w:
        for i in range(30):
            w.write({"id": i, "blob": bytes(range(i % 7, 200))})
    return folder


def test_a_reader_refuses_a_block_above_its_limit_naming_shard_and_block(dataset, monkeypatch):
    """I12: ``max_block_bytes`` (or SHARDKIT_MAX_BLOCK_BYTES) is checked before the block is read."""
    data = open_dataset(dataset)
    info = data.manifest.shards[0]
    reader = ShardReader(LocalFileSource(os.path.join(dataset, info.name)), info, max_block_bytes=500)
    with pytest.raises(CorruptShardError, match=rf"shard {SHARD0} .*: block 0 \(samples 0\.\.\d+\) at offset 16: "
                       r"block declares \d+ raw bytes, more than the maximum block size 500"):
        list(reader)
    monkeypatch.setenv("SHARDKIT_MAX_BLOCK_BYTES", "600")
    with pytest.raises(CorruptShardError, match="maximum block size 600"):
        list(data.samples())
    report = verify_dataset(data)
    assert not report.ok and "maximum block size 600" in report.shards[0].errors[0]
    assert verify_dataset(data, max_block_bytes=1 << 20).ok
    monkeypatch.delenv("SHARDKIT_MAX_BLOCK_BYTES")
    assert len(list(data.samples())) == 30


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 900), min_size=1, max_size=40), block_size=st.integers(1, 1000),
       limit=st.integers(920, 2000))
def test_no_writer_block_exceeds_the_maximum(tmp_path_factory, sizes, block_size, limit):
    """I12 (writer): whatever the samples and block_size, every block's raw size is at most the
    maximum; samples stay in order and whole."""
    folder = str(tmp_path_factory.mktemp("w") / "ds")
    writer = sk.ShardWriter(folder, shard_size=3000, block_size=min(block_size, limit), compression="none",
                            layout="rows")
    writer.options = dataclasses.replace(writer.options, max_block_bytes=limit)
    with writer:
        for i, size in enumerate(sizes):
            writer.write({"i": i, "b": bytes(size)})
    data = open_dataset(folder)
    for shard_index in range(len(data.manifest.shards)):
        with data.open_shard(shard_index) as reader:
            assert int(reader.index.blocks["raw_size"].max()) <= limit
    assert [(s["i"], len(s["b"])) for s in data.samples()] == list(enumerate(sizes))


def test_a_sample_larger_than_a_block_is_an_encode_error(tmp_path):
    writer = sk.ShardWriter(str(tmp_path / "ds"), block_size=100)
    writer.options = dataclasses.replace(writer.options, max_block_bytes=1000)
    writer.write({"b": bytes(10)})
    with pytest.raises(EncodeError, match=r"sample 1: encodes to \d+ bytes, more than the maximum block size 1000"):
        writer.write({"b": bytes(2000)})
    writer.close()
    assert [len(s["b"]) for s in open_dataset(str(tmp_path / "ds")).samples()] == [10]
    with pytest.raises(ValueError, match="block_size 1073741824 is above the maximum block size"):
        sk.ShardWriter(str(tmp_path / "big"), block_size="1GiB")


def _open_in_thread(path: str) -> BaseException | None:
    """Open ``path`` as a shard on a thread; fail the test if that blocks (a FIFO would)."""
    result: list[BaseException | None] = []

    def run() -> None:
        try:
            LocalFileSource(path).close()
            result.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert result, f"opening {path} blocked"
    return result[0]


@pytest.mark.parametrize("kind", ["fifo", "directory", "dev-null-link"])
def test_a_non_regular_file_is_refused_on_open_without_blocking(dataset, kind):
    """I14: readers (and so the loader) refuse it naming the path, before reading."""
    path = os.path.join(dataset, SHARD0)
    os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    else:
        os.symlink("/dev/null", path)
    error = _open_in_thread(path)
    assert isinstance(error, StorageError) and path in str(error) and "not a regular file" in str(error)
    with pytest.raises(StorageError, match="not a regular file"):
        open_dataset(dataset).open_shard(0)


def test_a_well_formed_shard_is_read_once_by_a_full_verify(dataset, monkeypatch):
    """I13: the checksum is fed by the block reads and the index by the reader's first request."""
    data = open_dataset(dataset)
    info = data.manifest.shards[0]
    reads: list[tuple[int, int]] = []
    original = LocalFileSource.read_range

    def counting(self, start, end):
        reads.append((start, end))
        return original(self, start, end)

    monkeypatch.setattr(LocalFileSource, "read_range", counting)
    report = verify_shard(data, info)
    assert report.ok, report.errors
    assert sum(end - start for start, end in reads) == info.num_bytes


def test_the_decode_budget_never_lets_more_than_its_limit_out():
    """I13: verify threads hold at most the budget of decompressed blocks; a larger block alone."""
    budget = ByteBudget(100)
    seen: list[int] = []

    def work(num_bytes: int) -> None:
        with budget.hold(num_bytes):
            seen.append(budget._used)
            time.sleep(0.005)

    threads = [threading.Thread(target=work, args=(n,)) for n in [60, 60, 30, 500, 10, 90, 40] * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(seen) == len(threads) and max(seen) <= 100 and budget._used == 0
