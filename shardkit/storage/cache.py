"""The node-local shard cache: download once per node, verify, lease, evict LRU (specs/cache.md).

``ShardCache.open`` returns a *lease*: a context manager yielding a local path that stays valid
(never evicted, never replaced) until the ``with`` block exits. Invariants K1–K16 are in
specs/cache.md; files in the cache dir are opened as cache_files.py says (K13–K15).

Thread- and process-safety: one ``ShardCache`` may be used by many threads; many processes
(DataLoader workers, ranks, users) may share one ``cache_dir``. Coordination is by ``flock`` on
per-entry lock files (K3, K4) plus a per-entry thread lock so threads of one process queue
cheaply instead of polling.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeGuard

from shardkit.errors import CacheError, StorageError, StorageTimeoutError
from shardkit.storage.budget import NodeBudget
from shardkit.storage.cache_files import make_private, regular_stat, seal
from shardkit.storage.cache_layout import Entry, ensure_root, entry_name, write_meta
from shardkit.storage.download import Downloader, DownloadOptions
from shardkit.storage.eviction import SpaceManager, disk_error, remove_temps
from shardkit.storage.locks import FileLock
from shardkit.storage.pacing import Pacing
from shardkit.storage.store import Store

if TYPE_CHECKING:
    from shardkit.storage.prefetch import Prefetcher

logger = logging.getLogger(__name__)

#: ``verify(path)`` raises (any exception) when the file at ``path`` is not the expected shard.
#: It may return the ``(st_dev, st_ino, st_size)`` of the file it checked (``fstat`` of the
#: descriptor it read): that file counts as verified in this process from then on (K2), also
#: when it is this process's own download, published by rename (the same inode).
Verify = Callable[[str], object]


@dataclass(frozen=True)
class CacheOptions:
    """Timeouts (seconds) and tuning of a ``ShardCache``; every wait is bounded (K9)."""

    lock_timeout: float = 900.0      # waiting for another process's download of the same entry
    space_timeout: float = 300.0     # waiting for leases to free room under the limit
    warn_after: float = 60.0         # log a warning when a wait or download takes longer
    poll_interval: float = 0.1
    verify_on_hit: bool = True       # verify a cached file once per process before first use (re-download if bad;
                                     # readers check what they read regardless, K45)
    verify_attempts: int = 3         # downloads tried when the fetched bytes fail ``verify``
    chunk_bytes: int = 8 * 1024 * 1024  # one ranged GET (part) of a download
    download_threads: int = 8            # parts of one download in flight at once
    node_connections: int = 64           # requests in flight, all processes of the node (K20)
    hedge_after: float | None = 1.0      # a late part gets a second request (K22); None: never
    hedge_factor: float = 4.0            # ... late = max(hedge_after, factor × median part time)
    hedge_min_bytes: int = 1 << 20       # ... smaller parts are never hedged
    plan_eviction: bool = True       # evict by the consumers' published next uses (K30); else LRU


@dataclass(frozen=True)
class CacheItem:
    """One object to cache: ``name`` in the store, cache ``key``, size and checksum callback."""

    name: str
    key: str
    num_bytes: int
    verify: Verify | None = None


@dataclass
class CacheStats:
    """Counters of one ``ShardCache`` in this process (G10)."""

    hits: int = 0
    misses: int = 0
    download_bytes: int = 0
    download_seconds: float = 0.0
    redownloads: int = 0
    parts: int = 0        # ranged GETs of downloads (K20), hedges not counted
    retries: int = 0      # part requests sent again after a transient failure (503s included)
    throttled: int = 0    # requests answered 503 SlowDown / 429 (K21)
    hedged: int = 0       # parts that got a second request (K22)
    hedge_wins: int = 0   # ... where the second one won
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, value in deltas.items():
                setattr(self, name, getattr(self, name) + value)


class ShardCache:
    """A size-limited cache of remote objects in ``cache_dir``, shared by processes and users."""

    def __init__(self, cache_dir: str, limit_bytes: int,
                 options: CacheOptions | None = None) -> None:
        if limit_bytes <= 0:
            raise ValueError(f"cache limit must be > 0 bytes, got {limit_bytes}")
        self.cache_dir = os.path.abspath(cache_dir)
        self.limit_bytes = int(limit_bytes)
        self.options = options or CacheOptions()
        self.stats = CacheStats()
        try:
            self.root = ensure_root(self.cache_dir)
        except CacheError:
            raise
        except OSError as exc:
            raise CacheError(f"cannot create cache dir {self.cache_dir}: {exc}") from exc
        self._space = SpaceManager(self.root, self.limit_bytes, timeout=self.options.space_timeout,
                                   warn_after=self.options.warn_after,
                                   poll_interval=self.options.poll_interval,
                                   plan_eviction=self.options.plan_eviction,
                                   lock_timeout=self.options.lock_timeout)
        self._verified: set[tuple[int, int, int]] = set()
        self._pid = os.getpid()
        self._guard = threading.Lock()
        self._entry_locks: dict[str, threading.Lock] = {}
        self._budget = NodeBudget(self.root, self.options.node_connections)
        self._downloads = self._new_downloader()

    def __repr__(self) -> str:
        return f"ShardCache({self.cache_dir!r}, limit_bytes={self.limit_bytes})"

    @contextlib.contextmanager
    def open(self, store: Store, name: str, *, key: str, num_bytes: int,
             verify: Verify | None = None) -> Iterator[str]:
        """Lease the local copy of ``name``: download it once per node if needed (K1–K3)."""
        local = store.local_path(name)
        if local is not None:
            yield local  # K8: local data is never copied or evicted
            return
        entry = Entry(self.root, entry_name(key))
        lock = self._lease(store, name, entry, key, num_bytes, verify, None)
        try:
            _touch(entry.data)  # last use, for LRU (K6)
            yield entry.data
        finally:
            lock.release()

    def ensure(self, store: Store, item: CacheItem,
               cancel: threading.Event | None = None) -> None:
        """Make ``item`` present in the cache and hold no lease afterwards (prefetch, warm)."""
        if not store.worth_caching:
            return
        entry = Entry(self.root, entry_name(item.key))
        lock = self._lease(store, item.name, entry, item.key, item.num_bytes, item.verify, cancel)
        lock.release()

    def holds(self, item: CacheItem) -> bool:
        """``item`` is published in the cache now, with its size (a snapshot: it may be evicted
        right after unless leased)."""
        st = regular_stat(Entry(self.root, entry_name(item.key)).data)
        return st is not None and st.st_size == item.num_bytes

    def prefetch(self, store: Store, items: Iterable[CacheItem], *, max_ahead: int = 2,
                 max_bytes: int | None = None, num_threads: int = 2, lazy: bool = False) -> Prefetcher:
        """A ``Prefetcher`` downloading ``items`` ahead of the consumer (see prefetch.py; ``lazy``:
        ``items`` is walked only as far as needed)."""
        from shardkit.storage.prefetch import Prefetcher

        return Prefetcher(self, store, items, max_ahead=max_ahead, max_bytes=max_bytes,
                          num_threads=num_threads, lazy=lazy)

    # ---- lease protocol ------------------------------------------------------------------
    def _lease(self, store: Store, name: str, entry: Entry, key: str, num_bytes: int,
               verify: Verify | None, cancel: threading.Event | None) -> FileLock:
        """A shared lock on ``entry`` whose data file is published and valid."""
        opts = self.options
        what = f"cache entry {key!r} for {store.url_of(name)}"
        for _ in range(4):
            lock = FileLock(entry.lock)
            lock.acquire(False, opts.lock_timeout, opts.warn_after, what)
            if self._valid(entry, num_bytes, verify, what):
                self.stats.add(hits=1)
                return lock
            lock.release()
            with self._thread_lock(entry.name, what):
                if not lock.acquire_to_write(lambda: self._valid(entry, num_bytes, verify, what, quiet=True),
                                             opts.lock_timeout, opts.warn_after, what):
                    self.stats.add(hits=1)  # filled by another process while we waited
                    return lock
                try:
                    if not self._valid(entry, num_bytes, verify, what):
                        self.stats.add(misses=1)
                        lock.record_holder()
                        self._fill(store, name, entry, key, num_bytes, verify, cancel)
                    lock.downgrade()
                except BaseException:
                    lock.release()
                    raise
            if _exists(entry.data):  # the downgrade is not atomic: an evictor may have won
                return lock
            lock.release()
        raise CacheError(f"{what}: evicted repeatedly while opening; cache {self.cache_dir} "
                         f"(limit {self.limit_bytes} bytes) is too small for the working set")

    def _valid(self, entry: Entry, num_bytes: int, verify: Verify | None, what: str, quiet: bool = False) -> bool:
        """Published with the right size and (once per process) passing ``verify`` (K2); ``quiet``: no
        warning for a file still being filled (wrong size), as a waiter polls it."""
        st = regular_stat(entry.data)
        if st is None:  # missing, or a link/special file planted there: replaced by _fill (K13)
            return False
        if st.st_size != num_bytes:
            if quiet:
                return False
            logger.warning("%s: cached file %s has %d bytes, expected %d; downloading again",
                           what, entry.data, st.st_size, num_bytes)
            return False
        ident = (st.st_dev, st.st_ino, st.st_size)
        if verify is None or not self.options.verify_on_hit or ident in self._verified:
            return True
        try:
            checked = verify(entry.data)
        except Exception as exc:  # verify signals a bad file by raising anything
            logger.warning("%s: cached file %s failed verification (%s); downloading again",
                           what, entry.data, exc)
            return False
        self._mark_verified(checked if _is_ident(checked) else ident)
        return True

    def _mark_verified(self, ident: tuple[int, int, int]) -> None:
        with self._guard:
            self._verified.add(ident)

    def _fill(self, store: Store, name: str, entry: Entry, key: str, num_bytes: int,
              verify: Verify | None, cancel: threading.Event | None) -> None:
        """Download, verify and publish ``entry``; the caller holds its exclusive lock."""
        remove_temps(_own_temps(entry))  # K4: a dead downloader's partial file is never used
        remove_temps([entry.data])  # damaged or wrong size; no lease can hold it while we hold EX
        url = store.url_of(name)
        errors: list[Exception] = []
        for attempt in range(1, self.options.verify_attempts + 1):
            tmp = self._space.reserve(entry, num_bytes)
            try:
                publish_mode = make_private(tmp, num_bytes)  # K46: nobody else can write it ...
                self._download(store, name, tmp, num_bytes, url, cancel)
                seal(tmp, publish_mode)  # ... nor anyone at all once the bytes are in, before the check
                checked = verify(tmp) if verify is not None else None
            except StorageError:
                remove_temps([tmp])
                raise
            except OSError as exc:
                remove_temps([tmp])
                raise disk_error(exc, self.cache_dir, num_bytes, entry.name) from exc
            except Exception as exc:  # verify failed: the fetched bytes are bad; fetch again
                remove_temps([tmp])
                errors.append(exc)
                self.stats.add(redownloads=1)
                logger.warning("%s: downloaded bytes failed verification (attempt %d/%d): %s",
                               url, attempt, self.options.verify_attempts, exc)
                continue
            except BaseException:
                remove_temps([tmp])
                raise
            os.replace(tmp, entry.data)  # K1: atomic publish
            write_meta(entry, key, url, num_bytes, store.url)
            if _is_ident(checked):  # the very file just checked (a rename keeps its inode): not hashed again (K2)
                self._mark_verified(checked)
            return
        final = errors[-1] if errors else CacheError(f"{url}: verify_attempts must be >= 1")
        final.add_note(f"downloading {url} into cache {self.cache_dir}: verification failed "
                       f"{len(errors)} times")
        raise final

    def _download(self, store: Store, name: str, tmp: str, num_bytes: int, url: str,
                  cancel: threading.Event | None) -> None:
        started = time.monotonic()
        timer = threading.Timer(self.options.warn_after, logger.warning,
                                args=("download of %s (%d bytes) still running after %.0fs",
                                      url, num_bytes, self.options.warn_after))
        timer.daemon = True
        timer.start()
        try:
            self.downloader().fetch(store, name, tmp, num_bytes, cancel)
        finally:
            timer.cancel()
        self.stats.add(download_bytes=num_bytes, download_seconds=time.monotonic() - started)

    def downloader(self) -> Downloader:
        """This process's downloads: their pacing (``.pacing``) and node budget (K20–K22)."""
        if self._downloads.pid != os.getpid():  # forked: the parent's in-flight counts are void
            self._downloads = self._new_downloader()
        return self._downloads

    def _new_downloader(self) -> Downloader:
        opts = self.options
        parts = DownloadOptions(part_bytes=opts.chunk_bytes, parts_in_flight=opts.download_threads,
                                hedge_after=opts.hedge_after, hedge_factor=opts.hedge_factor,
                                hedge_min_bytes=opts.hedge_min_bytes,
                                slot_timeout=opts.lock_timeout)
        return Downloader(parts, Pacing(opts.node_connections), self._budget, self.stats.add)

    def _thread_lock(self, entry_name_: str, what: str) -> _TimedLock:
        if self._pid != os.getpid():  # forked (DataLoader worker): parent threads' locks are void
            self._pid, self._guard, self._entry_locks = os.getpid(), threading.Lock(), {}
        with self._guard:
            lock = self._entry_locks.setdefault(entry_name_, threading.Lock())
        return _TimedLock(lock, self.options.lock_timeout, what)


class _TimedLock:
    def __init__(self, lock: threading.Lock, timeout: float, what: str) -> None:
        self.lock, self.timeout, self.what = lock, timeout, what

    def __enter__(self) -> None:
        if not self.lock.acquire(timeout=self.timeout):
            raise StorageTimeoutError(f"timed out after {self.timeout:.0f}s waiting for another "
                                      f"thread downloading {self.what}")

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def _own_temps(entry: Entry) -> list[str]:
    try:
        return [os.path.join(entry.root, f) for f in os.listdir(entry.root)
                if entry.is_own_temp(f)]
    except OSError:
        return []


def _touch(path: str) -> None:
    st = regular_stat(path)
    if st is None or st.st_nlink != 1:
        return  # never the times of a file named elsewhere too (K13)
    try:
        os.utime(path, follow_symlinks=False)
    except OSError:
        pass  # another user's file we may not touch: LRU order degrades, nothing breaks


def _exists(path: str) -> bool:
    return regular_stat(path) is not None


def _is_ident(checked: object) -> TypeGuard[tuple[int, int, int]]:
    """Whether a ``Verify``'s answer names the file it checked: ``(st_dev, st_ino, st_size)``."""
    return isinstance(checked, tuple) and len(checked) == 3 and all(type(v) is int for v in checked)
