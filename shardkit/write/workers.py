"""``pack``'s worker processes: tasks mapped in spawned processes, results in task order.

At most ``4 × workers`` tasks are in flight, so memory is bounded whatever the input's size.
Workers are *spawned*, so each one imports the main script again (as ``__mp_main__``); a script
that calls ``pack`` at module level, without an ``if __name__ == "__main__":`` guard, would run
its pack again in every worker. ``refuse_rerun_in_worker`` detects that in the worker and
raises :class:`WorkerError` naming the guard; the parent sees the worker die and raises one too.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from shardkit.errors import WorkerError

T = TypeVar("T")
R = TypeVar("R")
GUARD = 'if __name__ == "__main__":'
_IN_FLIGHT_PER_WORKER = 4


def refuse_rerun_in_worker(what: str = "sk.pack") -> None:
    """Raise in a spawned worker that is still importing the main script (its bootstrap)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise WorkerError(
            f"{what} was called while a worker process was importing the main script: the script "
            f"calls {what}(..., workers=N) at module level. Workers are spawned and import the main "
            f"script again, so put the call under `{GUARD}`")


def ordered_map(fn: Callable[[T], R], tasks: Iterable[T], workers: int) -> Iterator[R]:
    """``fn(task)`` for each task, in order: in this process (``workers <= 1``) or in
    ``workers`` spawned processes."""
    if workers <= 1:
        yield from map(fn, tasks)
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    window: deque[Future[R]] = deque()
    try:
        for task in tasks:
            window.append(pool.submit(fn, task))
            if len(window) >= _IN_FLIGHT_PER_WORKER * workers:
                yield _result(window.popleft())
        while window:
            yield _result(window.popleft())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _result(future: Future[R]) -> R:
    try:
        return future.result()
    except BrokenProcessPool:
        raise WorkerError(
            "a pack worker process died (killed, out of memory, or it failed to start: see its error "
            f"above; a script that calls sk.pack(..., workers=N) at module level must do so under "
            f"`{GUARD}`)") from None
