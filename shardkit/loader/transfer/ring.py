"""Reusable shared-memory slots for batches crossing from DataLoader workers to the trainer.

Without it every batch above the inline limit needs a fresh shared-memory segment: new pages
to fault in on both sides and, with torch's default sharing strategy, a file descriptor fetched
from the worker over a socket. Small batches go inline through the result pipe, which moves
64 KiB per write and needs the worker's GIL between writes (milliseconds per batch while the
worker decodes the next one).

A ``Ring`` is one anonymous ``MAP_SHARED`` mapping made by the training process *before* it
forks its workers, so every worker inherits it: no names in ``/dev/shm`` (its size limit in
containers does not apply, nothing can leak after a crash), no descriptor passing. Worker ``w``
owns ``slots`` fixed-size slots; a one-byte flag per slot says who owns it (X3–X5,
specs/batch-transport.md):

* only the worker sets a flag FREE → BUSY (``acquire``), only the trainer sets it BUSY → FREE
  (``release``), so no lock is needed;
* the trainer lends the slot out as one array and frees it when that array is garbage
  (``lending.py``, the one release rule, X2), so a batch the training loop still holds is never
  overwritten;
* when no slot is free (the loop keeps batches) or a batch does not fit, the worker falls back
  to a fresh buffer; nothing waits.

Only forked workers see the ring (the registry is inherited); spawn/forkserver workers use the
fallback. Untouched pages cost nothing (``MAP_NORESERVE``), so slots are sized generously.
"""

from __future__ import annotations

import itertools
import mmap
import os
import platform
import sys
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from shardkit.loader.transfer.lending import lend

SLOT_BYTES = 64 << 20  # virtual; only pages a batch touches become memory
HEADER_BYTES = 4096
FREE, BUSY = 0, 1
_FREE_BYTE = bytes([FREE])
_MAP_NORESERVE = 0x4000 if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64") else 0
_ids = itertools.count(1)
_rings: weakref.WeakValueDictionary[tuple[int, int], Ring] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class SlotRef:
    """What crosses the pipe instead of the bytes: which slot of which ring, how much of it."""

    ring: tuple[int, int]  # (pid of the trainer, serial)
    worker: int
    slot: int
    nbytes: int


class Ring:
    def __init__(self, num_workers: int, slots: int, slot_bytes: int = SLOT_BYTES) -> None:
        if num_workers < 1 or slots < 1 or slot_bytes < 1 or num_workers * slots > HEADER_BYTES:
            raise ValueError(f"bad ring shape: {num_workers} workers × {slots} slots of {slot_bytes} bytes")
        self.num_workers, self.slots, self.slot_bytes = num_workers, slots, slot_bytes
        self.key = (os.getpid(), next(_ids))
        size = HEADER_BYTES + num_workers * slots * slot_bytes
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | _MAP_NORESERVE)
        self._flags = np.frombuffer(self._map, dtype=np.uint8, count=num_workers * slots)
        self._buffers: dict[int, torch.Tensor] = {}  # slot index → its tensor, made once per process
        _rings[self.key] = self

    def _index(self, worker: int, slot: int) -> int:
        return worker * self.slots + slot

    def _offset(self, worker: int, slot: int) -> int:
        return HEADER_BYTES + self._index(worker, slot) * self.slot_bytes

    # ---- in the worker ----------------------------------------------------------------------
    def acquire(self, worker: int) -> int | None:
        """A free slot of ``worker``, now BUSY; None when the trainer holds all of them."""
        first = worker * self.slots
        found = self._map.find(_FREE_BYTE, first, first + self.slots)  # the flags lead the mapping
        if found < 0:
            return None
        self._flags[found] = BUSY
        return found - first

    def give_back(self, worker: int, slot: int) -> None:
        """The worker did not use a slot it acquired."""
        self._flags[self._index(worker, slot)] = FREE

    def buffer(self, worker: int, slot: int) -> torch.Tensor:
        """The whole slot as a uint8 tensor (the worker's arena)."""
        index = self._index(worker, slot)
        found = self._buffers.get(index)
        if found is None:
            found = self._buffers[index] = torch.frombuffer(
                self._map, dtype=torch.uint8, count=self.slot_bytes, offset=self._offset(worker, slot)
            )
        return found

    # ---- in the trainer -----------------------------------------------------------------------
    def _inside(self, ref: SlotRef) -> bool:
        slot_ok = 0 <= ref.worker < self.num_workers and 0 <= ref.slot < self.slots
        return slot_ok and 0 <= ref.nbytes <= self.slot_bytes

    def receive(self, ref: SlotRef) -> np.ndarray:
        """The slot's first ``nbytes`` (uint8); the slot is freed when the array and every view
        of it (numpy or torch) are garbage."""
        if not self._inside(ref):
            raise RuntimeError(f"batch names slot {ref.slot} of worker {ref.worker} ({ref.nbytes} bytes), "
                               f"outside ring {self.key}: {self.num_workers} workers × {self.slots} slots")
        return lend(self._map, self._offset(ref.worker, ref.slot), ref.nbytes, self._release,
                    self._index(ref.worker, ref.slot))

    def drop(self, ref: SlotRef) -> None:
        """Free the slot of a batch the training process lets go without ever receiving it."""
        if self._inside(ref):
            self._release(self._index(ref.worker, ref.slot))

    def _release(self, index: int) -> None:
        self._flags[index] = FREE

    def busy(self) -> int:
        """Slots not free right now (for tests and stats)."""
        return int(np.count_nonzero(self._flags))


def find(key: tuple[int, int] | list[int] | None) -> Ring | None:
    """The ring ``key`` names, if this process made or inherited it."""
    return None if key is None else _rings.get((int(key[0]), int(key[1])))


def forget(ref: SlotRef) -> None:
    """Free a slot whose batch the training process drops without ever resolving it."""
    ring = find(ref.ring)
    if ring is not None:
        ring.drop(ref)


def resolve(ref: SlotRef) -> np.ndarray:
    ring = find(ref.ring)
    if ring is None:
        raise RuntimeError(f"batch refers to shared ring {ref.ring}, which this process does not have")
    return ring.receive(ref)
