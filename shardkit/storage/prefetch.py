"""Download the next entries of a consumer's plan in background threads (K10).

A ``Prefetcher`` walks ``items`` in order, keeping at most ``max_ahead`` entries and
``max_bytes`` bytes fetched-but-not-yet-reached. It holds no leases: a prefetched entry is an
ordinary entry until the consumer opens it. It publishes the consumer's order and position in
the cache dir, so that eviction keeps what the node's consumers need soonest (next_use.py).
A background failure is stored with its entry and raised by ``open`` when the consumer
reaches that entry — never in a random thread, never lost (and logged at close if the
consumer never got there).

Usage::

    with cache.prefetch(store, items, max_ahead=2) as prefetcher:
        for item in items:
            with prefetcher.open(item) as path:
                ...

Thread-safety: ``open`` is for one consumer thread; ``close`` may be called from any thread.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from shardkit.storage.cache_layout import entry_name
from shardkit.storage.next_use import UsePublisher
from shardkit.storage.store import Store

if TYPE_CHECKING:
    from shardkit.storage.cache import CacheItem, ShardCache

logger = logging.getLogger(__name__)


class Prefetcher:
    """Background downloads ahead of one consumer, bounded by count and bytes, cancellable."""

    def __init__(self, cache: ShardCache, store: Store, items: Iterable[CacheItem], *,
                 max_ahead: int = 2, max_bytes: int | None = None, num_threads: int = 2,
                 lazy: bool = False) -> None:
        """``lazy``: ``items`` is a walk taken only as far as the window ahead needs (a consumer
        whose list would cost its whole epoch to make, specs/partition.md P35); the node's
        evictors then see none of it (K32 publishes a list known in advance)."""
        if max_ahead < 0 or num_threads < 1:
            raise ValueError(f"max_ahead must be >= 0 and num_threads >= 1, "
                             f"got {max_ahead} and {num_threads}")
        self.cache, self.store = cache, store
        self.max_ahead = max_ahead
        self.max_bytes = cache.limit_bytes // 2 if max_bytes is None else max_bytes
        self._more: Iterator[CacheItem] | None = iter(items) if lazy else None
        self._pending: collections.deque[CacheItem] = collections.deque(() if lazy else items)
        self._listed: set[str] = set()  # keys the lazy walk gave so far
        # The node's evictors read this consumer's order and position (K30–K32).
        self._uses = UsePublisher(cache.root, [entry_name(i.key) for i in self._pending], max_ahead)
        self._ahead: collections.OrderedDict[str, tuple[CacheItem, Future[None]]] = (
            collections.OrderedDict())
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=num_threads,
                                        thread_name_prefix="shardkit-prefetch")
        self._schedule()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def open(self, item: CacheItem) -> Iterator[str]:
        """Lease ``item``; re-raises the error its background download met, if any."""
        future = self._reach(item.key)
        if future is not None:
            error = future.exception()  # waits for the download; bounded by the cache timeouts
            if error is not None:
                error.add_note(f"raised by the prefetch of {self.store.url_of(item.name)}")
                raise error
        with self.cache.open(self.store, item.name, key=item.key, num_bytes=item.num_bytes,
                             verify=item.verify) as path:
            yield path

    def close(self) -> None:
        """Cancel: stop scheduling, cancel queued downloads, stop running ones between chunks."""
        self._cancel.set()
        with self._lock:
            self._pending.clear()
            self._more = None
            ahead = list(self._ahead.values())
            self._ahead.clear()
        for item, future in ahead:
            if not future.cancel() and future.done() and future.exception() is not None:
                logger.debug("prefetch of %s failed and was never reached: %s",
                             self.store.url_of(item.name), future.exception())
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._uses.close()

    def _reach(self, key: str) -> Future[None] | None:
        """Mark the consumer at ``key``: entries before it are dropped, the window moves."""
        self._uses.reach(entry_name(key))
        with self._lock:
            future = None
            if key in self._ahead:
                while self._ahead:
                    k, (_, f) = self._ahead.popitem(last=False)
                    if k == key:
                        future = f
                        break
                    f.cancel()  # skipped by the consumer
            else:
                self._drop_pending_through(key)
        self._schedule()
        return future

    def _drop_pending_through(self, key: str) -> None:
        if self._more is not None and key not in self._listed:  # reached before the walk listed it
            while self._pull() is not None and self._pending[-1].key != key:
                pass
        if any(item.key == key for item in self._pending):
            while self._pending and self._pending.popleft().key != key:
                pass

    def _pull(self) -> CacheItem | None:
        """The lazy walk's next item not listed yet, appended to the pending ones (None: none)."""
        if self._more is None:
            return None
        for item in self._more:
            if item.key not in self._listed:
                self._listed.add(item.key)
                self._pending.append(item)
                return item
        self._more = None
        return None

    def _schedule(self) -> None:
        with self._lock:
            while (self._pending or self._pull() is not None) and not self._cancel.is_set():
                ahead_bytes = sum(item.num_bytes for item, _ in self._ahead.values())
                nxt = self._pending[0]
                if len(self._ahead) >= self.max_ahead:
                    break
                if self._ahead and ahead_bytes + nxt.num_bytes > self.max_bytes:
                    break
                self._pending.popleft()
                if nxt.key in self._ahead:
                    continue
                future = self._pool.submit(self.cache.ensure, self.store, nxt, self._cancel)
                self._ahead[nxt.key] = (nxt, future)
