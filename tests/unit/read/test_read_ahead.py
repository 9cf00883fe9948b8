"""The read-ahead thread of ``ShardReader`` (checks and decompresses the next blocks, up to
``AHEAD_BYTES`` of them, while block k is unpacked; read/read_ahead.py): same samples, same
errors at the same place (specs/shard-format.md I5), and it never outlives the iteration that
started it."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import CorruptShardError
from shardkit.read import ReadOptions, open_dataset
from shardkit.read import read_ahead as read_ahead_module
from shardkit.read.shard_reader import ShardReader
from shardkit.read.sources import open_source


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


def open_reader(folder: str, views: bool = False) -> ShardReader:
    dataset = open_dataset(folder)
    info = dataset.manifest.shards[0]
    source = open_source(dataset.store, info.name, info.num_bytes)
    return ShardReader(source, info, options=ReadOptions(read_ahead=True, views=views))


def write_mixed(folder: str, count: int) -> None:
    """Blocks that alternate between stored raw (random bytes) and zstd (zeros)."""
    rng = np.random.default_rng(11)
    with sk.ShardWriter(folder, block_size=4096) as writer:
        for i in range(count):
            payload = rng.bytes(3000) if i // 2 % 2 else bytes(3000)
            writer.write({"id": i, "payload": payload})


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(1, 60),
    limit=st.sampled_from([1, 5000, 20_000, 1 << 20]),
    views=st.booleans(),
    bounds=st.tuples(st.integers(0, 60), st.integers(0, 61)),
)
def test_any_run_reads_the_same_with_any_read_ahead_limit(tmp_path_factory, count, limit, views, bounds):
    """Whatever the number of blocks in flight (one at a time up to all of them), and whichever
    blocks go ahead (compressed ones always, raw ones with ``views``), the chunks and their
    bytes are those of a reader without read-ahead."""
    folder = str(tmp_path_factory.mktemp("mixed"))
    write_mixed(folder, count)
    start, stop = bounds
    dataset = open_dataset(folder)
    previous = read_ahead_module.AHEAD_BYTES
    read_ahead_module.AHEAD_BYTES = limit
    try:
        with dataset.open_shard(0) as plain, open_reader(folder, views) as ahead:
            want = [[(s["id"], bytes(s["payload"])) for s in chunk] for chunk in plain.sample_chunks(start, stop)]
            got = [[(s["id"], bytes(s["payload"])) for s in chunk] for chunk in ahead.sample_chunks(start, stop)]
    finally:
        read_ahead_module.AHEAD_BYTES = previous
    assert got == want


def test_blocks_in_flight_stay_within_the_limit(tmp_path) -> None:
    """At most ``AHEAD_BYTES`` of raw blocks are with the helper (at least one block)."""
    write_tokens(str(tmp_path), count=400)
    seen: list[int] = []
    original = read_ahead_module.BlocksAhead.submit

    def submit(self, block_index: int, raw_bytes: int) -> None:
        original(self, block_index, raw_bytes)
        seen.append(self.bytes if len(self.in_flight) > 1 else 0)

    previous = read_ahead_module.AHEAD_BYTES
    read_ahead_module.AHEAD_BYTES = 6000
    read_ahead_module.BlocksAhead.submit = submit  # type: ignore[method-assign]
    try:
        with open_reader(str(tmp_path)) as ahead:
            assert sum(len(chunk) for chunk in ahead.sample_chunks()) == 400
    finally:
        read_ahead_module.BlocksAhead.submit = original  # type: ignore[method-assign]
        read_ahead_module.AHEAD_BYTES = previous
    assert len(seen) > 10 and max(seen) <= 6000


def test_stopping_early_cancels_what_the_helper_has_not_started(tmp_path) -> None:
    """Closing a run right after its first block leaves nothing in flight, and blocks the
    helper had not started are not read (the helper skips cancelled tasks)."""
    write_tokens(str(tmp_path), count=400)
    fetched: list[int] = []
    with open_reader(str(tmp_path)) as ahead:
        original = ahead.raw_block_ahead

        def fetch(block_index: int):
            fetched.append(block_index)
            return original(block_index)

        ahead.raw_block_ahead = fetch  # type: ignore[method-assign]
        gate = threading.Event()
        read_ahead_module._task_queue().put((lambda _: gate.wait(10), 0, _Run()))  # hold the helper
        original_close = read_ahead_module.BlocksAhead.close

        def close(self) -> None:
            self.cancelled = True
            gate.set()  # the helper goes on only once the run is cancelled
            original_close(self)

        read_ahead_module.BlocksAhead.close = close  # type: ignore[method-assign]
        try:
            chunks = ahead.sample_chunks()
            next(chunks)  # block 0 is read here; the next blocks wait behind the gate
            chunks.close()
        finally:
            read_ahead_module.BlocksAhead.close = original_close  # type: ignore[method-assign]
    assert fetched == []


class _Run:
    """A stand-in for ``BlocksAhead`` as the helper sees it (``cancelled``, ``results``)."""

    cancelled = False

    def __init__(self) -> None:
        import queue

        self.results: queue.SimpleQueue[object] = queue.SimpleQueue()


def _read_in_child(folder: str, out: multiprocessing.Queue) -> None:
    with open_reader(folder) as ahead:
        out.put(sum(len(chunk) for chunk in ahead.sample_chunks()))


def test_a_forked_child_starts_its_own_helper(tmp_path) -> None:
    """A helper started before a fork does not exist in the child; the child starts one."""
    write_tokens(str(tmp_path))
    with open_reader(str(tmp_path)) as ahead:
        assert sum(len(chunk) for chunk in ahead.sample_chunks()) == 200
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_read_in_child, args=(str(tmp_path), out))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert out.get(timeout=5) == 200


def test_one_helper_thread_serves_every_reader(tmp_path) -> None:
    write_tokens(str(tmp_path))
    for _ in range(5):
        with open_reader(str(tmp_path)) as ahead:
            for _chunk in ahead.sample_chunks():
                pass
    helpers = [t for t in threading.enumerate() if t.name == "shardkit-read-ahead"]
    assert len(helpers) == 1 and helpers[0].daemon


def test_the_idle_helper_keeps_no_reader_alive(tmp_path) -> None:
    """Once a run is over, the helper holds nothing of it: a closed reader (and its memory map)
    is freed, not kept until the next task."""
    write_tokens(str(tmp_path))
    reader = open_reader(str(tmp_path))
    assert sum(len(chunk) for chunk in reader.sample_chunks()) == 200
    reader.close()
    ref = weakref.ref(reader)
    del reader
    deadline = time.monotonic() + 5
    while ref() is not None and time.monotonic() < deadline:  # the helper may still be returning
        gc.collect()
        time.sleep(0.01)
    assert ref() is None
