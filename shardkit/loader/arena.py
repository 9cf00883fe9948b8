"""A bump allocator for one batch, so collation writes straight into the buffer that crosses
to the training process (``packed.py``) instead of into tensors that are copied there later.

``with Arena(capacity) as arena:`` makes ``alloc`` hand out 64-byte-aligned views of one
buffer (a ``bytearray`` below ``INLINE_BYTES``, one shared-memory segment above); when the
buffer is full, ``alloc`` falls back to ``torch.empty`` and the packer copies those tensors.
Outside an arena, ``alloc`` is ``torch.empty``. One arena per thread; never reused after the
batch leaves (its memory belongs to that batch).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

ALIGN = 64
INLINE_BYTES = 1 << 20
_local = threading.local()


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Arena:
    def __init__(self, capacity: int) -> None:
        self.capacity = aligned(max(capacity, ALIGN))
        self.storage: torch.Tensor | bytearray
        if self.capacity < INLINE_BYTES:
            self.storage = bytearray(self.capacity)
            self.buffer = torch.frombuffer(self.storage, dtype=torch.uint8)
        else:
            self.buffer = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(self.capacity))
            self.storage = self.buffer
        self.used = 0
        self.wanted = 0  # bytes every alloc asked for, for sizing the next arena
        self._base = self.buffer.data_ptr()

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        count = 1
        for dim in shape:
            count *= dim
        nbytes = count * torch.empty(0, dtype=dtype).element_size()
        self.wanted += aligned(nbytes)
        if self.used + nbytes > self.capacity:
            return torch.empty(shape, dtype=dtype)
        view = self.buffer[self.used : self.used + nbytes].view(dtype).view(shape)
        self.used = aligned(self.used + nbytes)
        return view

    def offset_of(self, tensor: torch.Tensor) -> int | None:
        """Where ``tensor`` starts in this arena, or None if it lives elsewhere."""
        ptr = tensor.data_ptr()
        if not tensor.is_contiguous() or not self._base <= ptr < self._base + self.capacity:
            return None
        return ptr - self._base

    def __enter__(self) -> Arena:
        _local.arena = self
        return self

    def __exit__(self, *exc: object) -> None:
        _local.arena = None


def alloc(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor: from the current arena if one is active, else ``torch.empty``."""
    arena: Arena | None = getattr(_local, "arena", None)
    if arena is None:
        return torch.empty(shape, dtype=dtype)
    return arena.empty(shape, dtype)


def alloc_like(values: Any, dtype: torch.dtype) -> torch.Tensor:
    """A 1-D tensor of ``dtype`` holding ``values`` (a list of Python numbers)."""
    out = alloc((len(values),), dtype)
    out.numpy()[:] = values
    return out
