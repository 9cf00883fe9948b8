"""Blocks of a remote shard fetched by concurrent range requests ahead of their consumer (K33).

Without a cache dir a shard's blocks come straight from the store. One request per block, in
order, leaves the link idle for a round trip per block; ``RangesAhead`` keeps up to
``max_requests`` range requests in flight over the blocks a run will read next, joins adjacent
blocks into one request up to ``coalesce_bytes`` (blocks are contiguous, I3), and stops
fetching while ``max_bytes`` stored bytes are fetched but not yet consumed. The first request
of a run is its first block alone, so the first batch waits for one block, not for a range.

Each block is checked against its xxh64 on the fetching thread (I5) — the error names the
shard and the block — and raised where the consumer reaches that block, never lost.

Threads: one small pool per run, made by the process that reads (so a forked DataLoader worker
never inherits one), shut down by ``close`` (``ShardReader.sample_chunks`` calls it in
``finally``, so an early ``break`` leaves no thread): queued requests are cancelled and running
ones — each bounded by the store's timeouts — are waited for. Not thread-safe: one consumer
per run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

Fetch = Callable[[int, int], Sequence[bytes | memoryview]]
Sizes = Sequence[int] | np.ndarray[Any, Any]  # stored size of each block of the shard, by index


@dataclass(frozen=True)
class RangeOptions:
    """How far a remote run reads ahead: requests in flight, stored bytes fetched but not yet
    consumed (the first request is always allowed), and the most bytes one request joins."""

    max_requests: int = 4
    max_bytes: int = 32 << 20
    coalesce_bytes: int = 4 << 20

    def __post_init__(self) -> None:
        if self.max_requests < 1 or self.max_bytes < 1 or self.coalesce_bytes < 1:
            raise ValueError(f"RangeOptions need positive values, got {self}")


def group_blocks(sizes: Sizes, blocks: range, coalesce_bytes: int) -> list[range]:
    """``blocks`` cut into runs of adjacent blocks, one range request each: the first block
    alone, then as many blocks as fit in ``coalesce_bytes`` (a larger block goes alone)."""
    groups: list[range] = []
    start, total = blocks.start, 0
    for index in blocks:
        size = int(sizes[index])
        if index > start and (index == blocks.start + 1 or total + size > coalesce_bytes):
            groups.append(range(start, index))
            start, total = index, 0
        total += size
    if start < blocks.stop:
        groups.append(range(start, blocks.stop))
    return groups


class RangesAhead:
    """The blocks of one run, fetched ahead; ``take(i)`` in block order returns block ``i``.

    ``fetch(first, stop)`` runs on a pool thread and returns the checked stored bytes of blocks
    ``[first, stop)``; ``sizes[i]`` is block ``i``'s stored size."""

    def __init__(self, fetch: Fetch, sizes: Sizes, blocks: range, options: RangeOptions) -> None:
        self._fetch, self._sizes, self._options = fetch, sizes, options
        self._groups = deque(group_blocks(sizes, blocks, options.coalesce_bytes))
        self._in_flight: deque[tuple[range, Future[Sequence[bytes | memoryview]]]] = deque()
        self._ready: deque[bytes | memoryview] = deque()
        self._next = blocks.start  # the block ``take`` hands out next
        self._bytes = 0  # stored bytes requested and not yet taken
        self._pool = ThreadPoolExecutor(max_workers=options.max_requests, thread_name_prefix="shardkit-range")
        self._submit()

    def take(self, block_index: int) -> bytes | memoryview:
        """Block ``block_index``'s checked stored bytes; its fetch error is raised here."""
        if block_index != self._next:
            raise ValueError(f"blocks are taken in order: expected {self._next}, got {block_index}")
        if not self._ready:
            _, future = self._in_flight.popleft()
            self._ready.extend(future.result())  # waits; re-raises the fetch's error
            self._submit()
        stored = self._ready.popleft()
        self._next += 1
        self._bytes -= int(self._sizes[block_index])
        self._submit()
        return stored

    def close(self) -> None:
        """Cancel what has not started, wait for running requests; no thread outlives this."""
        self._groups.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._in_flight.clear()
        self._ready.clear()

    def _submit(self) -> None:
        options = self._options
        while self._groups and len(self._in_flight) < options.max_requests:
            group = self._groups[0]
            size = sum(int(self._sizes[i]) for i in group)
            if self._bytes and self._bytes + size > options.max_bytes:
                break
            self._groups.popleft()
            self._bytes += size
            self._in_flight.append((group, self._pool.submit(self._fetch, group.start, group.stop)))
