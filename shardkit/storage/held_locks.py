"""The descriptors through which this process holds flocks, closed in a forked child (K20, K24).

A flock belongs to the open file description, and a forked child's copy of a descriptor
refers to the same description: for as long as the child keeps its copy, the lock outlives the
parent's ``close`` — and the parent's death, since the kernel then only closes the parent's
copy. A DataLoader worker forked while its parent held a lease or a download slot would keep
it for the worker's whole life. So holders register each descriptor while it holds a lock
(``HELD``), release with ``LOCK_UN`` before closing (which ends the lock whatever copies
exist), and a forked child closes its copies right after ``fork`` — which drops nothing: the
parent's descriptor still holds the lock.

Thread-safety: ``add``/``discard`` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading


class HeldLocks:
    """Descriptors holding a flock in this process now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: set[int] = set()

    def add(self, fd: int) -> None:
        with self._lock:
            self._fds.add(fd)

    def release(self, fd: int) -> None:
        """Unlock and close ``fd`` (a descriptor ``add``ed in this process)."""
        with self._lock:
            self._fds.discard(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)  # explicit: a forked copy must not keep it
        finally:
            os.close(fd)

    def after_fork_in_child(self) -> None:
        """In a forked child, before any other thread exists there: forget the parent's
        locks; closing our copies unlocks nothing."""
        self._lock = threading.Lock()  # another parent thread may have held the old one
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = set()


HELD = HeldLocks()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=HELD.after_fork_in_child)
