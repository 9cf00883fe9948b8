"""Blocks fetched ahead of their consumer by one helper thread per process: the ``"helper"`` way
of the block fetcher (read/fetcher.py, specs/read-path.md RP5).

The fetcher hands the next blocks of its run (up to ``AHEAD_BYTES`` of them) to the helper,
which reads, checks (I5) and decompresses them while the consumer decodes and collates the
current one. xxhash, zstd and file reads release the GIL, so on a spare core the
check and the decompression cost the consumer nothing but two GIL hand-offs per block.

Why several blocks ahead, not one: the helper needs the GIL briefly between blocks, and the
consumer, busy in Python, lets go of it only now and then (CPython switches threads every 5 ms
at worst). One block ahead, the consumer waited for the helper on most blocks; with a few MiB
ahead the helper catches up in those gaps. Measured on 85 KB image samples at W=0 on 2 cores,
with the benchmark's digest, interleaved in one process: 18.5k samples/s one block ahead,
19.6k two blocks ahead, 28.2k eight blocks (8 MiB) ahead; 4 MiB ahead was worse than 8, and
16 MiB no better (benchmarks/README.md).

Tasks and results travel through ``queue.SimpleQueue`` (C code, no Python lock per block).
Results come back in submission order: one helper, FIFO.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

AHEAD_BYTES = 8 << 20  # raw bytes in flight per run: decompressed blocks are held until consumed
_DRAIN_SECONDS = 30.0  # closing a run waits this long at most for the helper to let go of it

_tasks: tuple[int, queue.SimpleQueue[Any]] | None = None
_tasks_lock = threading.Lock()


def _helper(tasks: queue.SimpleQueue[Any]) -> None:
    while True:
        _run_task(*tasks.get())  # a call, so that nothing of a task outlives it while idle


def _run_task(fetch: Callable[[int], Any], block_index: int, run: BlocksAhead) -> None:
    if run.cancelled:
        run.results.put((False, None))
        return
    try:
        run.results.put((True, fetch(block_index)))
    except BaseException as exc:  # handed to the consumer, raised where the block is consumed
        run.results.put((False, exc))


def _task_queue() -> queue.SimpleQueue[Any]:
    """The helper's task queue, started on first use (again after a fork: threads do not survive
    one). A daemon thread: an idle helper never holds up interpreter exit."""
    global _tasks
    with _tasks_lock:
        if _tasks is None or _tasks[0] != os.getpid():
            tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
            threading.Thread(target=_helper, args=(tasks,), name="shardkit-read-ahead", daemon=True).start()
            _tasks = (os.getpid(), tasks)
        return _tasks[1]


class BlocksAhead:
    """The blocks of one run that are in flight on the helper, oldest first.

    ``fetch(block_index)`` runs on the helper and returns the block's checked raw bytes.
    Not thread-safe: one consumer per run. ``close`` must be called (the fetcher's run does, in
    ``finally``) so that the helper is done with the reader before it is closed or reused."""

    def __init__(self, fetch: Callable[[int], Any], limit: int | None = None) -> None:
        self.fetch, self.limit = fetch, AHEAD_BYTES if limit is None else limit
        self.results: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self.in_flight: deque[tuple[int, int]] = deque()  # (block index, raw bytes)
        self.bytes = 0
        self.cancelled = False
        self._tasks = _task_queue()

    def has_room(self, raw_bytes: int) -> bool:
        """Room for one more block of ``raw_bytes`` (always for the first)."""
        return not self.in_flight or self.bytes + raw_bytes <= self.limit

    def submit(self, block_index: int, raw_bytes: int) -> None:
        self._tasks.put((self.fetch, block_index, self))
        self.in_flight.append((block_index, raw_bytes))
        self.bytes += raw_bytes

    def holds(self, block_index: int) -> bool:
        """Whether ``block_index`` is the next block the helper hands back."""
        return bool(self.in_flight) and self.in_flight[0][0] == block_index

    def take(self) -> Any:
        """The oldest block in flight, once the helper has it; its error, raised here."""
        ok, value = self.results.get()
        self.bytes -= self.in_flight.popleft()[1]
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Cancel what the helper has not started; wait for what it has."""
        self.cancelled = True
        if sys.is_finalizing():  # the helper may already be gone
            return
        deadline = time.monotonic() + _DRAIN_SECONDS
        while self.in_flight:
            try:
                self.results.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                log.warning("read-ahead: %d blocks still with the helper after %.0f s; not waiting",
                            len(self.in_flight), _DRAIN_SECONDS)
                return
            self.bytes -= self.in_flight.popleft()[1]
