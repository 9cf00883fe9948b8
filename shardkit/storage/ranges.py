"""Cache-less streaming: byte ranges of one object fetched ahead in threads, yielded in order.

The shard reader uses this when there is no cache dir (G7, P3): ``store.read_suffix`` for the
footer and index, then ``prefetch_ranges`` over the blocks it will decode. Each range is a
``store.read_range`` call, so it is retried per the store's ``RetryPolicy`` and every error
names the URL and byte range. At most ``max_ahead`` ranges are in flight or buffered.

Thread-safety: a ``RangeReader`` is iterated by one thread; ``close`` may come from any thread.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from shardkit.storage.store import Store


class RangeReader:
    """Iterator of ``bytes`` for ``ranges`` (``(start, end)`` pairs) of ``name``, in order."""

    def __init__(self, store: Store, name: str, ranges: Iterable[tuple[int, int]], *,
                 max_ahead: int = 4, num_threads: int | None = None) -> None:
        if max_ahead < 1:
            raise ValueError(f"max_ahead must be >= 1, got {max_ahead}")
        self.store, self.name = store, name
        self.max_ahead = max_ahead
        self._ranges = iter(ranges)
        self._window: collections.deque[Future[bytes]] = collections.deque()
        self._pool = ThreadPoolExecutor(max_workers=num_threads or min(max_ahead, 8),
                                        thread_name_prefix="shardkit-ranges")
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if self._closed:
            raise StopIteration
        self._fill()
        if not self._window:
            self.close()
            raise StopIteration
        future = self._window.popleft()
        try:
            data = future.result()
        except BaseException:
            self.close()
            raise
        self._fill()
        return data

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel queued reads; reads already on the wire finish in the background."""
        if self._closed:
            return
        self._closed = True
        for future in self._window:
            future.cancel()
        self._window.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _fill(self) -> None:
        while len(self._window) < self.max_ahead:
            try:
                start, end = next(self._ranges)
            except StopIteration:
                return
            self._window.append(self._pool.submit(self.store.read_range, self.name, start, end))


def prefetch_ranges(store: Store, name: str, ranges: Iterable[tuple[int, int]],
                    max_ahead: int = 4) -> RangeReader:
    """Bytes of each ``(start, end)`` range of ``name``, in order, up to ``max_ahead`` ahead."""
    return RangeReader(store, name, ranges, max_ahead=max_ahead)
