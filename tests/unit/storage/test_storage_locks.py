"""FileLock.acquire_to_write (specs/cache.md K1): a process that found an entry missing and waits
to fill it takes a shared lease as soon as another process has filled it, instead of waiting
for an exclusive lock that the other process's lease blocks for as long as it reads (a hang
found with two DataLoader workers prefetching the same shard of a mixture)."""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest

from shardkit.errors import StorageTimeoutError
from shardkit.storage.locks import FileLock
from tests.helpers.fork_holders import killed_holder_with_live_child


def test_a_filled_entry_is_leased_shared_while_another_lease_blocks_the_exclusive_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "e.lock")
    reader = FileLock(path)  # flock: two open files conflict as two processes would
    reader.acquire(False, 1, 1, "entry")
    filler = FileLock(path)
    assert filler.acquire_to_write(lambda: True, 5, 5, "entry") is False
    assert filler.held and not filler.exclusive
    filler.release()
    reader.release()


def test_an_entry_still_missing_waits_for_the_exclusive_lock_and_times_out_by_name(tmp_path: Path) -> None:
    path = str(tmp_path / "e.lock")
    reader = FileLock(path)
    reader.acquire(False, 1, 1, "entry")
    with pytest.raises(StorageTimeoutError, match="exclusive lock of entry"):
        FileLock(path).acquire_to_write(lambda: False, 0.2, 5, "entry")
    reader.release()
    filler = FileLock(path)
    assert filler.acquire_to_write(lambda: False, 5, 5, "entry") is True
    assert filler.held and filler.exclusive
    filler.release()


FORK = multiprocessing.get_context("fork")


@pytest.mark.slow
@pytest.mark.parametrize("exclusive", [False, True], ids=["lease", "download"])
def test_a_forked_child_does_not_keep_its_dead_parents_entry_lock_k24(tmp_path: Path, exclusive: bool) -> None:
    """flock belongs to the open file; a DataLoader worker forked during a lease or download
    has a copy of it. The child closes its copy at fork, so the lock dies with its holder."""
    path = str(tmp_path / "e.lock")

    def hold() -> FileLock:
        lock = FileLock(path)
        lock.acquire(exclusive, 5, 5, "entry")
        return lock

    with killed_holder_with_live_child(hold):
        assert FileLock(path).try_acquire(True)  # the grandchild still runs


def test_a_released_lease_is_free_while_a_child_forked_during_it_lives_k24(tmp_path: Path) -> None:
    """The lease a parent releases is released, whatever children it forked meanwhile; in the
    child, the inherited lock object is not held and releasing it closes nothing of the child's."""
    path = str(tmp_path / "e.lock")
    lease = FileLock(path)
    lease.acquire(False, 1, 1, "entry")
    ready, stop = FORK.Event(), FORK.Event()
    child = FORK.Process(target=_release_inherited, args=(lease, ready, stop))
    child.start()
    try:
        assert ready.wait(30)
        lease.release()
        assert FileLock(path).try_acquire(True)
    finally:
        stop.set()
        child.join(30)
    assert child.exitcode == 0


def _release_inherited(lease: FileLock, ready: Event, stop: Event) -> None:
    other = os.open(os.devnull, os.O_RDONLY)  # may have the inherited descriptor's number
    inherited_held = lease.held
    lease.release()
    os.fstat(other)  # still open: the release closed nothing here
    ready.set()
    stop.wait(60)
    os._exit(0 if not inherited_held else 3)
