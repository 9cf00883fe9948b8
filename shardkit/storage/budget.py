"""One node-wide budget of concurrent requests, shared by every process of a cache dir (K20).

The budget is ``num_slots`` slot files, ``<cache_dir>/v1/.slots/<i>.lock``; a request in
flight holds an exclusive ``flock`` on one of them. flock is what makes it crash-safe: the
kernel drops the lock when its holder dies, SIGKILL included, so a killed downloader never
keeps its slots. Processes that configure different sizes share the low-numbered slots.

A slot is released by ``LOCK_UN`` before its descriptor is closed, and a forked child closes
its copies of held slots right after ``fork`` (storage/locks.py): a SIGKILLed parent's slots are
not kept alive by its DataLoader workers.

Slot files are shared by every member of the cache dir's group, and each gets the mode of
its creator's umask (K15): one created under umask 022 is read-only to the others. flock
needs only a readable descriptor, so such a slot is opened read-only, as entry locks are
(K43). A slot that cannot be opened at all (unreadable, missing in a folder we may not write,
a planted link or special file) is skipped; when no slot of the budget can be opened, the
request goes without one (``NO_SLOT``; a warning, once per process): the budget spreads the
node's connections, it must never stop a download.

Waiting polls the slots (flock has no timeout) starting at a random one, backing off from
2 ms to 20 ms, bounded by ``timeout`` and stopped by ``cancel``.

Thread-safety: ``acquire``/``release`` may be called from any thread.
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import time
from collections.abc import Callable

from shardkit.errors import StorageTimeoutError
from shardkit.storage.cache_files import check_dir, make_dir, open_regular
from shardkit.storage.locks import hold, release_held

logger = logging.getLogger(__name__)

SLOTS_DIR = ".slots"
#: What ``try_acquire``/``acquire`` return when no slot file can be opened: go without one.
NO_SLOT = -1
_warned: set[str] = set()
_MIN_POLL = 0.002
_MAX_POLL = 0.02


class NodeBudget:
    """At most ``num_slots`` requests in flight at once across all processes of the node."""

    def __init__(self, root: str, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"node_connections must be >= 1, got {num_slots}")
        self.folder = os.path.join(root, SLOTS_DIR)
        self.num_slots = num_slots
        make_dir(self.folder)
        check_dir(self.folder, follow=False)  # a link planted here is refused (K13)

    def slot_path(self, index: int) -> str:
        return os.path.join(self.folder, f"{index}.lock")

    def try_acquire(self) -> int | None:
        """The descriptor of a slot taken now, None when all are in use, ``NO_SLOT`` when
        none can be opened (K43)."""
        first, usable = random.randrange(self.num_slots), 0
        for step in range(self.num_slots):
            fd = self._open_slot(self.slot_path((first + step) % self.num_slots))
            if fd is None:
                continue
            usable += 1
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            hold(fd)
            return fd
        if usable:
            return None
        if self.folder not in _warned:
            _warned.add(self.folder)
            logger.warning("none of the %d download slots in %s can be opened (modes or files "
                           "set by another user?); downloading without the node's budget",
                           self.num_slots, self.folder)
        return NO_SLOT

    @staticmethod
    def _open_slot(path: str) -> int | None:
        try:
            return open_regular(path, os.O_RDWR | os.O_CREAT)
        except PermissionError:  # another member's slot (umask 022) or a folder we cannot write
            pass
        except OSError as exc:  # a planted link or special file (CacheError, K13)
            logger.debug("skipping download slot %s: %s", path, exc)
            return None
        try:
            return open_regular(path, os.O_RDONLY)  # flock needs only a readable descriptor
        except OSError as exc:
            logger.debug("skipping download slot %s: %s", path, exc)
            return None

    def acquire(self, timeout: float, cancel: Callable[[], bool] | None = None) -> int | None:
        """Wait for a slot (None once ``cancel()`` is true); ``StorageTimeoutError`` after
        ``timeout`` seconds (K9)."""
        started = time.monotonic()
        pause = _MIN_POLL
        while (fd := self.try_acquire()) is None:
            if cancel is not None and cancel():
                return None
            if time.monotonic() - started > timeout:
                raise StorageTimeoutError(
                    f"timed out after {timeout:.0f}s waiting for one of the {self.num_slots} "
                    f"download slots of the node ({self.folder}); other processes hold them all"
                )
            time.sleep(pause)
            pause = min(_MAX_POLL, pause * 2)
        return fd

    @staticmethod
    def release(fd: int) -> None:
        if fd != NO_SLOT:
            release_held(fd)

    def num_free(self) -> int:
        """Slots free now (a snapshot, for tests and diagnostics; takes and drops each)."""
        taken: list[int] = []
        try:
            while (fd := self.try_acquire()) is not None and fd != NO_SLOT:
                taken.append(fd)
            return len(taken)
        finally:
            for fd in taken:
                self.release(fd)
