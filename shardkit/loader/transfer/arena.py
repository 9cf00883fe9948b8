"""A bump allocator for one batch, so collation writes straight into the buffer that crosses
to the training process (``packed.py``) instead of into tensors that are copied there later.

``with Arena(capacity) as arena:`` makes ``alloc`` hand out 64-byte-aligned views of one
buffer: a slot of the loader's shared ring when one is free (``ring.py``, reused batch after
batch), else a fresh buffer (``buffers.py``). When the buffer is full, ``alloc`` falls back
to ``torch.empty`` and the packer copies those tensors. Outside an arena, ``alloc`` takes from
the allocator made current with ``allocating`` (the training process's ``Recycler``,
recycler.py), else it is ``torch.empty``. One arena or allocator per thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import torch

from shardkit.loader.transfer.buffers import ALIGN, aligned, fresh_buffer
from shardkit.loader.transfer.dtypes import numel, numpy_dtype
from shardkit.loader.transfer.ring import Ring, SlotRef

_local = threading.local()


class Arena:
    def __init__(self, capacity: int, slot: tuple[Ring, int, int] | None = None) -> None:
        """``slot`` = (ring, worker, slot index) acquired by ``batch_arena``."""
        self.slot = slot
        self.capacity = aligned(max(capacity, ALIGN)) if slot is None else slot[0].slot_bytes
        self.storage: torch.Tensor | bytearray
        if slot is not None:
            self.buffer = slot[0].buffer(slot[1], slot[2])
            self.storage = self.buffer
        else:
            self.storage, self.buffer = fresh_buffer(self.capacity)
        self.used = 0
        self.wanted = 0  # bytes every alloc asked for, for sizing the next arena
        self._base = self.buffer.data_ptr()
        self._array = self.buffer.numpy()  # numpy views are several times cheaper than torch's

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        np_dtype = numpy_dtype(dtype)
        if np_dtype is not None:
            return torch.from_numpy(self.empty_array(shape, np_dtype))
        nbytes = numel(shape) * dtype.itemsize
        start = self._take(nbytes)
        if start is None:
            return torch.empty(shape, dtype=dtype)
        return self.buffer[start : start + nbytes].view(dtype).view(shape)

    def empty_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """As ``empty``, as a numpy array (a fresh one past the capacity)."""
        nbytes = numel(shape) * dtype.itemsize
        start = self._take(nbytes)
        if start is None:
            return np.empty(shape, dtype=dtype)
        return self._array[start : start + nbytes].view(dtype).reshape(shape)

    def _take(self, nbytes: int) -> int | None:
        """The offset of ``nbytes`` taken from the arena (counted as wanted either way), or
        None when they do not fit."""
        self.wanted += aligned(nbytes)
        if self.used + nbytes > self.capacity:
            return None
        start, self.used = self.used, aligned(self.used + nbytes)
        return start

    def offset_of(self, tensor: torch.Tensor) -> int | None:
        """Where ``tensor`` starts in this arena, or None if it lives elsewhere."""
        if tensor.numel() == 0:
            return 0  # nothing to locate (torch may report any pointer for an empty view)
        ptr = tensor.data_ptr()
        if not tensor.is_contiguous() or not self._base <= ptr < self._base + self.capacity:
            return None
        return ptr - self._base

    def sealed(self) -> torch.Tensor | bytearray | SlotRef:
        """What carries the batch to the trainer: the slot's name, or the buffer itself."""
        if self.slot is None:
            return self.storage
        ring, worker, index = self.slot
        return SlotRef(ring.key, worker, index, self.used)

    def discard(self, reusable: bool) -> None:
        """The batch left in another buffer: give the ring slot back if nothing can still point
        into it (``reusable``, or nothing allocated); else keep it BUSY for the ring's lifetime."""
        if self.slot is not None and (reusable or self.used == 0):
            self.slot[0].give_back(self.slot[1], self.slot[2])
        self.slot = None

    def __enter__(self) -> Arena:
        _local.arena = self
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        _local.arena = None
        if exc_type is not None:  # collation failed: nothing of this batch goes anywhere
            self.discard(reusable=True)


def batch_arena(capacity: int, ring: Ring | None, worker: int) -> Arena:
    """An arena over a free slot of ``ring`` if there is one, else over a fresh buffer."""
    if ring is not None:
        slot = ring.acquire(worker)
        if slot is not None:
            return Arena(0, (ring, worker, slot))
    return Arena(capacity)


class Allocator(Protocol):
    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor: ...

    def empty_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...


@contextlib.contextmanager
def allocating(allocator: Allocator) -> Iterator[None]:
    """``alloc`` in this thread takes from ``allocator`` (e.g. a ``Recycler``) for the block."""
    _local.arena = allocator
    try:
        yield
    finally:
        _local.arena = None


def alloc(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor: from the current arena if one is active, else ``torch.empty``."""
    arena: Allocator | None = getattr(_local, "arena", None)
    if arena is None:
        return torch.empty(shape, dtype=dtype)
    return arena.empty(shape, dtype)


def alloc_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``alloc`` as a numpy array (``dtype`` one numpy and torch share): inside an arena, a view
    of its buffer with no torch tensor made and unmade (token blocks, several per batch)."""
    arena: Allocator | None = getattr(_local, "arena", None)
    if arena is None:
        return np.empty(shape, dtype=dtype)
    return arena.empty_array(shape, dtype)


def alloc_like(values: Any, dtype: torch.dtype) -> torch.Tensor:
    """A 1-D tensor of ``dtype`` holding ``values`` (a list of Python numbers)."""
    out = alloc((len(values),), dtype)
    out.numpy()[:] = values
    return out
