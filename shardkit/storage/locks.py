"""Inter-process locks on lock files with ``fcntl.flock`` (specs/cache.md, "Lock protocol").

Why flock: the kernel drops it when the holder's last descriptor closes — including when the
process is SIGKILLed — so a crash never leaves a stale lock (K4). flock locks belong to an open
file description, so two threads of one process that each open the file also exclude each other.

Lock files may be unlinked by a holder of the exclusive lock (eviction). An acquirer therefore
checks, after locking, that the path still names the inode it locked, and retries otherwise.

Lock files are opened through ``cache_files.open_regular``: a link or special file planted at a
lock path is refused (``CacheError``), never followed, and no mode is ever changed (K13, K15).

Locks and fork (K20, K24): a flock belongs to the open file description, and a forked child's
copy of a descriptor refers to the same description: for as long as the child keeps its copy,
the lock outlives the parent's ``close`` — and the parent's death, since the kernel then only
closes the parent's copy. A DataLoader worker forked while its parent held a lease or a
download slot would keep it for the worker's whole life. So every holder (``FileLock`` here,
storage/budget.py's slots) registers each descriptor while it holds a lock (``hold``), releases
with ``LOCK_UN`` before closing (``release_held``, which ends the lock whatever copies exist),
and a forked child closes its copies right after ``fork`` — which drops nothing: the parent's
descriptor still holds the lock. ``hold``/``release_held`` may be called from any thread. A
``FileLock`` object that crossed a fork is not held in the child: releasing it there only
forgets it.

Waiting polls with a non-blocking flock (flock itself has no timeout); every wait is bounded by
a timeout and logs a warning, naming the holder pid, once it exceeds ``warn_after``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable

from shardkit.errors import StorageTimeoutError
from shardkit.storage.cache_files import open_regular, sole_link
from shardkit.storage.shared_reads import read_small

logger = logging.getLogger(__name__)

_MIN_POLL = 0.005
_MAX_POLL = 0.1
_MAX_PID_BYTES = 32

_held_lock = threading.Lock()
_held_fds: set[int] = set()  # descriptors holding a flock in this process now


def hold(fd: int) -> None:
    """Register ``fd``, which now holds a flock (closed in a forked child)."""
    with _held_lock:
        _held_fds.add(fd)


def release_held(fd: int) -> None:
    """Unlock and close ``fd`` (a descriptor ``hold``-registered in this process)."""
    with _held_lock:
        _held_fds.discard(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)  # explicit: a forked copy must not keep it
    finally:
        os.close(fd)


def _forget_held_after_fork() -> None:
    """In a forked child, before any other thread exists there: forget the parent's locks;
    closing our copies unlocks nothing."""
    global _held_lock, _held_fds
    _held_lock = threading.Lock()  # another parent thread may have held the old one
    for fd in _held_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _held_fds = set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_held_after_fork)


class FileLock:
    """A shared or exclusive flock on ``path``. Not shared between threads: one per use."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = os.getpid()  # the process whose descriptor ``_fd`` is
        self.exclusive = False

    @property
    def held(self) -> bool:
        if self._fd is not None and self._pid != os.getpid():  # crossed a fork: the child's copy is closed
            self._fd = None
        return self._fd is not None

    def try_acquire(self, exclusive: bool) -> bool:
        """Take the lock if free now; never waits."""
        if self.held:
            raise RuntimeError(f"lock {self.path} is already held by this object")
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        for _ in range(8):  # retries only when the file was replaced under us
            fd = _open_lock_file(self.path)
            try:
                fcntl.flock(fd, mode)
            except BlockingIOError:
                os.close(fd)
                return False
            if _same_file(fd, self.path):
                hold(fd)
                self._fd, self._pid, self.exclusive = fd, os.getpid(), exclusive
                return True
            os.close(fd)  # unlinked by an evictor between our open and flock: use the new one
        return False

    def acquire(self, exclusive: bool, timeout: float, warn_after: float, what: str) -> None:
        """Wait up to ``timeout`` seconds; ``what`` names the entry in warnings and errors."""
        self._wait(lambda: self.try_acquire(exclusive), "exclusive" if exclusive else "shared",
                   timeout, warn_after, what)

    def acquire_to_write(self, ready: Callable[[], bool], timeout: float, warn_after: float, what: str) -> bool:
        """The exclusive lock, to fill what it guards (True); or, as soon as ``ready()`` holds under
        the shared lock, that shared lock (False): another process filled it meanwhile, and its
        lease would block the exclusive lock for as long as it reads (K1)."""
        filled = False

        def attempt() -> bool:
            nonlocal filled
            if self.try_acquire(True):
                return True
            if self.try_acquire(False):
                if ready():
                    filled = True
                    return True
                self.release()
            return False

        self._wait(attempt, "exclusive", timeout, warn_after, what)
        return not filled

    def _wait(self, attempt: Callable[[], bool], kind: str, timeout: float, warn_after: float, what: str) -> None:
        started = time.monotonic()
        pause = _MIN_POLL
        warned = False
        while not attempt():
            waited = time.monotonic() - started
            if waited > timeout:
                raise StorageTimeoutError(
                    f"timed out after {waited:.0f}s waiting for the {kind} lock of {what} ({self.path}); "
                    f"holder pid: {self.holder_pid() or 'unknown'}"
                )
            if not warned and waited > warn_after:
                warned = True
                logger.warning("waiting %.1fs for the lock of %s (%s); holder pid: %s",
                               waited, what, self.path, self.holder_pid() or "unknown")
            time.sleep(pause)
            pause = min(_MAX_POLL, pause * 2)

    def downgrade(self) -> None:
        """Exclusive → shared. Not atomic (flock(2)): callers re-validate what they guard."""
        if not self.held or self._fd is None:
            raise RuntimeError(f"lock {self.path} is not held")
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        self.exclusive = False

    def release(self) -> None:
        if self.held and self._fd is not None:
            fd, self._fd = self._fd, None
            release_held(fd)

    def record_holder(self) -> None:
        """Write our pid into the lock file, for "holder pid" diagnostics; never into a file
        that has another name too (a hard link planted at the lock path, K13)."""
        if not self.held or self._fd is None:
            return
        try:
            if not sole_link(self._fd):
                return
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # read-only lock file of another user: diagnostics only

    def holder_pid(self) -> int | None:
        """The pid ``record_holder`` wrote, for diagnostics; None unless the lock file holds
        a small positive number and nothing else (another user may have written it, K40)."""
        try:
            text = read_small(self.path, _MAX_PID_BYTES).decode("ascii").strip()
            pid = int(text) if text.isdigit() else 0
        except (OSError, ValueError):  # CacheError, UntrustedFileError, UnicodeDecodeError
            return None
        return pid if 0 < pid < 1 << 32 else None

    def unlink(self) -> None:
        """Remove the lock file; only while holding it exclusively."""
        if not self.held or not self.exclusive:
            raise RuntimeError(f"unlink of {self.path} needs the exclusive lock")
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _open_lock_file(path: str) -> int:
    """Open (creating if missing) the regular file at ``path``; never a link (K13)."""
    try:
        return open_regular(path, os.O_RDWR | os.O_CREAT)
    except PermissionError:
        # Another user's lock file we may not write: flock needs only a readable descriptor.
        return open_regular(path, os.O_RDONLY)


def _same_file(fd: int, path: str) -> bool:
    try:
        on_disk = os.lstat(path)  # a link now at the path is not the file we locked
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)
