"""Space accounting and eviction for the cache (specs/cache.md, "Eviction").

Before a download, ``reserve`` takes the cache-wide ``.space.lock``, counts published entries
plus in-progress temp files, evicts entries that nobody holds (K5) — first the one the node's
consumers will use furthest ahead (next_use.py; K30, K31), least recently used where no
consumer says (K6) — and creates the temp file already ``num_bytes`` long (so the next process
counts it, and a full disk fails here, before any byte is fetched). If the bytes in use leave no room it polls until
``space_timeout``, then raises ``CacheError`` with the numbers (K7).

Bytes are counted as the disk they take (``counted_bytes``, K42), never more than a file's
length: a sparse file planted by another member of the group costs the disk nothing, so it
must not fill the limit for everyone.

An entry is "in use" when its lock cannot be taken exclusively without waiting: a lease
(shared) or a download (exclusive) holds it. Eviction only ever tries non-blocking locks while
holding ``.space.lock``, so it cannot deadlock with a downloader waiting for ``.space.lock``.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass, field

from shardkit.errors import CacheError
from shardkit.storage.cache_files import create_new, regular_stat
from shardkit.storage.cache_layout import (
    DATA_SUFFIX,
    SPACE_LOCK,
    TEMP_MARK,
    Entry,
    entry_of_filename,
)
from shardkit.storage.locks import FileLock
from shardkit.storage.next_use import NextUses, read_next_uses

logger = logging.getLogger(__name__)

_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


@dataclass
class EntryStat:
    entry: Entry
    size: int = 0
    last_use: float = 0.0
    temps: list[str] = field(default_factory=list)
    temp_bytes: int = 0
    published: bool = False


def counted_bytes(st: os.stat_result) -> int:
    """What a file counts against the limit (K42): the bytes the disk holds for it
    (``st_blocks`` × 512), at most its length. For every file the cache writes the two agree
    (a temp file is allocated in full, a published one was written in full); a sparse file
    (a length with no blocks behind it) counts for its blocks only."""
    return min(st.st_size, st.st_blocks * 512)


def scan(root: str) -> dict[str, EntryStat]:
    """Every entry under ``root`` with its counted size (K42), last use and temp files."""
    stats: dict[str, EntryStat] = {}
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return stats
    for filename in names:
        entry = entry_of_filename(root, filename)
        if entry is None or not (filename.endswith(DATA_SUFFIX) or TEMP_MARK in filename):
            continue
        st = regular_stat(os.path.join(root, filename))
        if st is None:
            continue  # removed concurrently, or a link/special file the cache never made (K13)
        item = stats.setdefault(entry.name, EntryStat(entry))
        if filename.endswith(DATA_SUFFIX) and TEMP_MARK not in filename:
            item.size, item.last_use, item.published = counted_bytes(st), st.st_mtime, True
        else:
            item.temps.append(os.path.join(root, filename))
            item.temp_bytes += counted_bytes(st)
    return stats


def remove_entry(entry: Entry, lock: FileLock) -> bool:
    """Delete an entry's files; ``lock`` must be its exclusive lock. False if not permitted."""
    try:
        os.unlink(entry.data)
    except FileNotFoundError:
        pass
    except PermissionError:
        logger.debug("cannot evict %s: permission denied", entry.data)
        return False
    for path in (entry.meta,):
        try:
            os.unlink(path)
        except OSError:
            pass
    lock.unlink()
    return True


def remove_temps(paths: list[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


class SpaceManager:
    """Keeps published + in-progress bytes under ``limit_bytes`` for one cache root."""

    def __init__(self, root: str, limit_bytes: int, *, timeout: float, warn_after: float,
                 poll_interval: float, plan_eviction: bool = True, lock_timeout: float | None = None) -> None:
        """``timeout``: how long to wait for room (K7); ``lock_timeout``: for ``.space.lock``
        itself, held for milliseconds by each holder (default ``timeout``). Apart, so a short
        wait for room never fails a reserve that only queued behind busy holders of the lock."""
        self.root = root
        self.lock_timeout = timeout if lock_timeout is None else lock_timeout
        self.plan_eviction = plan_eviction
        self.limit_bytes = limit_bytes
        self.timeout = timeout
        self.warn_after = warn_after
        self.poll_interval = poll_interval

    def reserve(self, entry: Entry, num_bytes: int) -> str:
        """A new temp file for ``entry``, ``num_bytes`` long, once there is room for it."""
        if num_bytes > self.limit_bytes:
            raise CacheError(
                f"cache {self.root}: an entry of {num_bytes} bytes ({entry.name}) can never fit "
                f"in the cache limit of {self.limit_bytes} bytes; raise the limit"
            )
        started = time.monotonic()
        warned = False
        while True:
            with _held(FileLock(os.path.join(self.root, SPACE_LOCK)), self.lock_timeout, self.root):
                in_use = self._make_room(entry, num_bytes)
                if in_use is None:
                    return allocate_temp(entry, num_bytes)
            waited = time.monotonic() - started
            message = (f"cache {self.root}: no room for {num_bytes} bytes ({entry.name}): "
                       f"{in_use} bytes are in use by open leases or downloads, "
                       f"limit {self.limit_bytes} bytes")
            if waited > self.timeout:
                raise CacheError(f"{message}; gave up after {waited:.0f}s")
            if not warned and waited > self.warn_after:
                warned = True
                logger.warning("%s; waiting (%.0fs so far)", message, waited)
            time.sleep(self.poll_interval)

    def _make_room(self, entry: Entry, num_bytes: int) -> int | None:
        """Evict entries until ``num_bytes`` fit, furthest next use first (K30, K31), else least
        recently used (K6); None on success, else the bytes in use."""
        stats = scan(self.root)
        used = sum(s.size + s.temp_bytes for s in stats.values())
        if used + num_bytes <= self.limit_bytes:
            return None
        in_use = 0
        uses = read_next_uses(self.root) if self.plan_eviction else NextUses()
        for item in sorted(stats.values(), key=lambda s: uses.victim_key(s.entry.name, s.last_use)):
            if used + num_bytes <= self.limit_bytes:
                return None
            if item.entry.name == entry.name:
                continue  # ours: the caller holds it and cleared its stale temps
            lock = FileLock(item.entry.lock)
            if not try_exclusive(lock):
                in_use += item.size + item.temp_bytes
                continue
            try:
                remove_temps(item.temps)  # no one holds the entry: its temps are a dead download's
                used -= item.temp_bytes
                if item.published and remove_entry(item.entry, lock):
                    logger.debug("evicted %s (%d bytes)", item.entry.data, item.size)
                    used -= item.size
            finally:
                lock.release()
        return None if used + num_bytes <= self.limit_bytes else in_use


def try_exclusive(lock: FileLock) -> bool:
    """The exclusive lock if free now; False too when the lock path is unusable (a planted
    link or special file: the entry is left alone, K13)."""
    try:
        return lock.try_acquire(exclusive=True)
    except CacheError as exc:
        logger.warning("skipping cache entry: %s", exc)
        return False


class _held:
    """``with _held(lock, timeout, what):`` an exclusive lock, released on exit."""

    def __init__(self, lock: FileLock, timeout: float, what: str) -> None:
        self.lock, self.timeout, self.what = lock, timeout, what

    def __enter__(self) -> FileLock:
        self.lock.acquire(True, self.timeout, warn_after=self.timeout / 2, what=self.what)
        return self.lock

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def allocate_temp(entry: Entry, num_bytes: int) -> str:
    """Create ``entry``'s temp file with ``num_bytes`` allocated; disk full → ``CacheError``."""
    path = entry.new_temp()
    try:
        fd = create_new(path)  # O_EXCL: never an existing file or link; mode 0666 & ~umask (K15)
    except OSError as exc:
        raise disk_error(exc, entry.root, num_bytes, entry.name) from exc
    try:
        try:
            if num_bytes:
                os.posix_fallocate(fd, 0, num_bytes)
        except OSError as exc:
            if exc.errno in _DISK_FULL:
                raise
            os.ftruncate(fd, num_bytes)  # filesystem without fallocate: size only
    except OSError as exc:
        os.close(fd)
        remove_temps([path])
        raise disk_error(exc, entry.root, num_bytes, entry.name) from exc
    os.close(fd)
    return path


def disk_error(exc: OSError, root: str, num_bytes: int, name: str) -> CacheError:
    if exc.errno in _DISK_FULL:
        return CacheError(f"cache {root}: disk full or file size limit while storing {name} "
                          f"({num_bytes} bytes): {exc.strerror}")
    return CacheError(f"cache {root}: cannot write {name} ({num_bytes} bytes): {exc}")
