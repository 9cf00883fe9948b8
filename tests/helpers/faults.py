"""Deterministic faults at a writer's n-th mutation of its output folder.

A *mutation* is a call that changes what a reader of the folder can see: publishing a file
(``LocalAtomicWrite.commit``, ``write_atomic``, ``copy``) or deleting one (``delete``), on
every store backend that defines them. ``fail_at(n, action)`` patches those so that the n-th
call (1-based) runs ``action`` instead — raise an exception, or SIGKILL the process — and
returns a counter.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from shardkit.storage.atomic import LocalAtomicWrite
from shardkit.storage.fsspec_store import FsspecStore
from shardkit.storage.local_store import LocalStore
from shardkit.storage.memory_store import MemoryStore
from shardkit.storage.s3_store import S3Store

_BACKENDS: tuple[type, ...] = (LocalStore, MemoryStore, FsspecStore, S3Store)
#: Each method where it is defined (patching an inherited one too would count a call twice).
MUTATIONS: list[tuple[type, str]] = [(LocalAtomicWrite, "commit")] + [
    (backend, name) for name in ("write_atomic", "copy", "delete") for backend in _BACKENDS
    if name in vars(backend)]


class InjectedFault(RuntimeError):
    """Raised by ``fail_at`` in place of a mutation."""


class Counter:
    def __init__(self) -> None:
        self.calls: list[str] = []


def raise_fault(what: str) -> None:
    raise InjectedFault(f"injected fault at {what}")


def sigkill(what: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def fail_at(index: int, action: Callable[[str], None] = raise_fault) -> Iterator[Counter]:
    """Within the block, the ``index``-th mutation (1-based; 0: none) runs ``action``."""
    counter = Counter()
    originals = [(owner, name, getattr(owner, name)) for owner, name in MUTATIONS
                 if hasattr(owner, name)]

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter.calls.append(f"{name} {getattr(self, 'target', '')}{args[:2]}")
            if len(counter.calls) == index:
                if isinstance(self, LocalAtomicWrite) and action is raise_fault:
                    self.discard()  # as a commit that fails does
                action(counter.calls[-1])
            return method(self, *args, **kwargs)
        return patched

    for owner, name, method in originals:
        setattr(owner, name, wrap(name, method))
    try:
        yield counter
    finally:
        for owner, name, method in originals:
            setattr(owner, name, method)
