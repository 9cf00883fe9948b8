"""Reused buffers for the large tensors of batches collated in the training process (X6).

With ``num_workers=0`` (and wherever batches are not packed into a ring slot, ``packed.py``)
``alloc`` would be ``torch.empty``: a fresh multi-megabyte buffer per batch, whose pages the
copy into it then touches cold. Measured on the benchmark's images (85 KB samples, batch 64,
W=0; paired medians of alternations in one process): collation took 31.5 µs a sample into
fresh buffers and 28.6 µs with the recycler; the loader read 8.5% more samples/s (16
alternations), 13% more with the benchmark's digest (20). Token batches (~150 KB) gained
nothing, hence the 1 MiB floor.

A buffer is handed out again only when nothing can still see it, by the same rule as a ring
slot (``lending.py``, X2): each tensor is made from one lent array over the buffer, and the
buffer is free again once that array is garbage — which it is exactly when no tensor, view,
``.numpy()`` array, ``Ragged`` or batch of it is left, wherever held. A user who keeps batches
simply keeps their buffers busy; past ``keep`` busy buffers, ``empty`` falls back to
``torch.empty``.
"""

from __future__ import annotations

import numpy as np
import torch

from shardkit.loader.transfer.dtypes import numel, numpy_dtype, torch_dtype
from shardkit.loader.transfer.lending import lend

RECYCLE_BYTES = 1 << 20  # smaller tensors come from torch.empty (the allocator's own pools)
RECYCLE_MAX = 256 << 20  # larger ones too: the recycler would hold up to ``keep`` of them for an epoch


class Recycler:
    """Hands out tensors of at least ``RECYCLE_BYTES`` from up to ``keep`` reusable buffers."""

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._buffers: list[np.ndarray] = []  # uint8, from numpy's allocator (as fast to fill as any)
        self._lent: list[bool] = []
        self.reused = 0  # buffers handed out again (for tests)

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        nbytes = numel(shape) * dtype.itemsize
        if not RECYCLE_BYTES <= nbytes <= RECYCLE_MAX:  # most tensors: small
            return torch.empty(shape, dtype=dtype)
        np_dtype = numpy_dtype(dtype)
        index = self._free(nbytes) if np_dtype is not None else None
        if index is None or np_dtype is None:
            return torch.empty(shape, dtype=dtype)
        self._lent[index] = True
        array = lend(self._buffers[index].data, 0, nbytes, self._release, index)
        return torch.from_numpy(array.view(np_dtype).reshape(shape))

    def empty_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """As ``empty``, as a numpy array; a small one straight from numpy (no tensor made and
        unmade: token batches ask for several per batch)."""
        if numel(shape) * dtype.itemsize < RECYCLE_BYTES:
            return np.empty(shape, dtype=dtype)
        found: np.ndarray = self.empty(shape, torch_dtype(dtype)).numpy()
        return found

    def _free(self, nbytes: int) -> int | None:
        """A buffer not lent out, grown to ``nbytes`` if need be; None if all are busy."""
        for index, lent in enumerate(self._lent):
            if not lent:
                if len(self._buffers[index]) < nbytes:  # a larger batch: replace it (the old one is free)
                    self._buffers[index] = _new_buffer(nbytes)
                else:
                    self.reused += 1
                return index
        if len(self._buffers) >= self.keep:
            return None
        self._buffers.append(_new_buffer(nbytes))
        self._lent.append(False)
        return len(self._buffers) - 1

    def _release(self, index: int) -> None:
        self._lent[index] = False

    def addresses(self) -> list[int]:
        """Where each buffer starts in memory (for tests)."""
        return [int(buffer.ctypes.data) for buffer in self._buffers]


def _new_buffer(nbytes: int) -> np.ndarray:
    return np.empty(nbytes + nbytes // 8, dtype=np.uint8)  # room for the next, larger batches
