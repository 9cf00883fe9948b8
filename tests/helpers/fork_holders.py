"""A lock holder that forks a child and then dies by SIGKILL, the child living on: how a
trainer's DataLoader worker outlives a crashed parent (specs/cache.md K20, K24)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator
from multiprocessing.synchronize import Event

FORK = multiprocessing.get_context("fork")


def _hold_fork_and_die(hold: Callable[[], object], child_ready: Event, stop: Event) -> None:
    held = hold()  # noqa: F841 - kept referenced until the kill
    child = FORK.Process(target=stop.wait, args=(60,))
    child.start()
    child_ready.set()
    os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def killed_holder_with_live_child(hold: Callable[[], object]) -> Iterator[None]:
    """Run ``hold()`` in a forked process, which then forks an idle child and SIGKILLs itself;
    the body runs once the holder is dead while its child still runs."""
    ready, stop = FORK.Event(), FORK.Event()
    parent = FORK.Process(target=_hold_fork_and_die, args=(hold, ready, stop))
    parent.start()
    try:
        assert ready.wait(30)
        deadline = time.monotonic() + 30
        while parent.exitcode is None and time.monotonic() < deadline:  # not join(): the
            time.sleep(0.02)  # grandchild holds the pipe join() waits on
        assert parent.exitcode == -signal.SIGKILL
        yield
    finally:
        stop.set()
