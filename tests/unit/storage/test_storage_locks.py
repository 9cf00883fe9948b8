"""FileLock.acquire_to_write (specs/cache.md K1): a process that found an entry missing and waits
to fill it takes a shared lease as soon as another process has filled it, instead of waiting
for an exclusive lock that the other process's lease blocks for as long as it reads (a hang
found with two DataLoader workers prefetching the same shard of a mixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardkit.errors import StorageTimeoutError
from shardkit.storage.locks import FileLock


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
