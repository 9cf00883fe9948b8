"""Blocks of a remote shard fetched by concurrent range requests ahead of their consumer (K33):
the ``"ranges"`` way of the block fetcher (read/fetcher.py).

Without a cache dir a shard's blocks come straight from the store. One request per block, in
order, leaves the link idle for a round trip per block; the fetcher keeps up to
``max_requests`` range requests in flight over the blocks a run reads next, joins adjacent
blocks of one shard into one request up to ``coalesce_bytes`` (blocks are contiguous, I3), and
stops fetching while ``max_bytes`` stored bytes are fetched but not yet consumed.
``group_blocks`` is that grouping over one shard's run: the first block alone (the block the
consumer is reaching, so a first batch waits for one block, not for a range), then as many as
fit.

Each block is checked against its xxh64 on the fetching thread (I5) — the error names the
shard and the block — and raised where the consumer reaches that block, never lost.

Threads: one small pool per run, made by the process that reads (so a forked DataLoader worker
never inherits one) on its first request, shut down by ``close`` (the run's ``finally``, so an
early ``break`` leaves no thread): queued requests are cancelled and running ones — each
bounded by the store's timeouts — are waited for. Not thread-safe: one consumer per run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    """Range requests of one run in flight, oldest first, with the shape of ``BlocksAhead``:
    ``submit(positions, sizes, fetch)`` starts one request whose ``fetch()`` returns the checked
    stored bytes of the blocks at those run positions (adjacent blocks of one shard);
    ``holds(p)`` says whether ``p`` is the next position handed back; ``take()`` returns it,
    waiting for its request, and raises the request's error there."""

    def __init__(self, options: RangeOptions) -> None:
        self.options = options
        self._requests: deque[Future[Sequence[bytes | memoryview]]] = deque()
        self._ready: deque[bytes | memoryview] = deque()
        self._positions: deque[tuple[int, int]] = deque()  # (run position, stored bytes) not yet taken
        self._bytes = 0  # stored bytes requested and not yet taken
        self._pool: ThreadPoolExecutor | None = None

    def has_room(self, stored_bytes: int) -> bool:
        """Room for one more request of ``stored_bytes`` (always when nothing is outstanding)."""
        if len(self._requests) >= self.options.max_requests:
            return False
        return not self._bytes or self._bytes + stored_bytes <= self.options.max_bytes

    def submit(self, positions: Sequence[int], sizes: Sequence[int],
               fetch: Callable[[], Sequence[bytes | memoryview]]) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.options.max_requests,
                                            thread_name_prefix="shardkit-range")
        self._requests.append(self._pool.submit(fetch))
        self._positions.extend(zip(positions, sizes, strict=True))
        self._bytes += sum(sizes)

    def holds(self, position: int) -> bool:
        return bool(self._positions) and self._positions[0][0] == position

    def take(self) -> bytes | memoryview:
        """The oldest position's checked stored bytes; its request's error is raised here."""
        if not self._ready:
            self._ready.extend(self._requests.popleft().result())  # waits; re-raises the fetch's error
        self._bytes -= self._positions.popleft()[1]
        return self._ready.popleft()

    def close(self) -> None:
        """Cancel what has not started, wait for running requests; no thread outlives this."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._requests.clear()
        self._ready.clear()
        self._positions.clear()
