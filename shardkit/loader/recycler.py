"""Reused buffers for the large tensors of batches collated in the training process.

With ``num_workers=0`` (and wherever batches are not packed into a ring slot, ``packed.py``)
``alloc`` used to be ``torch.empty``: a fresh multi-megabyte buffer per batch, whose pages the
copy into it then touches cold. Measured on the benchmark's images (85 KB samples, batch 64,
W=0; paired medians of alternations in one process): collation took 31.5 µs a sample into
fresh buffers and 28.6 µs with the recycler; the loader read 8.5% more samples/s (16
alternations), 13% more with the benchmark's digest (20). Token batches (~150 KB) gained
nothing, hence the 1 MiB floor.

A buffer is handed out again only when nothing can still see it. It is a numpy array owned by
the recycler; each tensor made from it keeps a reference to that array through its storage (so
do views, slices and ``.numpy()`` of those tensors), and dropping the last of them drops the
reference. The array's reference count is therefore its baseline — the recycler's own
references — exactly when no tensor of an earlier batch still lives, wherever it is held. A
user who keeps batches simply keeps their buffers busy; past ``keep`` busy buffers, ``empty``
falls back to ``torch.empty``. Spec: specs/resume-state.md L11.
"""

from __future__ import annotations

import math
import sys
import sysconfig

import numpy as np
import torch

from shardkit.loader.arena import numpy_dtype

RECYCLE_BYTES = 1 << 20  # smaller tensors come from torch.empty (the allocator's own pools)
RECYCLE_MAX = 256 << 20  # larger ones too: the recycler would hold up to ``keep`` of them for an epoch
# Reference counts say whether a buffer is free only where every reference is counted: not on a
# free-threaded build, whose deferred reference counting may leave some uncounted.
_COUNTED = not sysconfig.get_config_var("Py_GIL_DISABLED")


class Recycler:
    """Hands out tensors of at least ``RECYCLE_BYTES`` from up to ``keep`` reusable buffers."""

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._buffers: list[np.ndarray] = []
        self._baseline = 0  # a free buffer's reference count, as _refs sees it
        self.reused = 0  # buffers handed out again (for tests)

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        nbytes = math.prod(shape) * dtype.itemsize
        if not RECYCLE_BYTES <= nbytes <= RECYCLE_MAX or not _COUNTED:  # most tensors: small
            return torch.empty(shape, dtype=dtype)
        np_dtype = numpy_dtype(dtype)
        if np_dtype is None:
            return torch.empty(shape, dtype=dtype)
        buffer = self._free(nbytes)
        if buffer is None:
            return torch.empty(shape, dtype=dtype)
        return torch.from_numpy(buffer[:nbytes].view(np_dtype).reshape(shape))

    def _free(self, nbytes: int) -> np.ndarray | None:
        """A buffer nothing else refers to, grown to ``nbytes`` if need be; None if all are busy."""
        buffers = self._buffers
        for index in range(len(buffers)):
            if self._refs(index) == self._baseline:
                if len(buffers[index]) < nbytes:  # a larger batch: replace it (the old one is free)
                    buffers[index] = _new_buffer(nbytes)
                else:
                    self.reused += 1
                return buffers[index]
        if len(buffers) >= self.keep:
            return None
        buffers.append(_new_buffer(nbytes))
        if not self._baseline:
            self._baseline = self._refs(len(buffers) - 1)
        return buffers[-1]

    def _refs(self, index: int) -> int:
        """The reference count of buffer ``index``, always taken through this one expression so
        that what the interpreter adds for the call itself is the same each time."""
        return sys.getrefcount(self._buffers[index])


def _new_buffer(nbytes: int) -> np.ndarray:
    return np.empty(nbytes + nbytes // 8, dtype=np.uint8)  # room for the next, larger batches
