"""Default collation (runs in the worker): a list of sample dicts → one batch dict of tensors.

Per field: equal-shape arrays/tensors → one stacked tensor; numbers/bools → a 1-D tensor;
variable-length arrays (same trailing shape and dtype) and bytes (or memoryviews) → ``Ragged``;
str → list[str]; anything else → a list. Buffers are filled in place (``np.stack(..., out=)``), one copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardkit.format.sample_views import owned
from shardkit.loader.arena import alloc, alloc_like
from shardkit.loader.ragged import Ragged, torch_dtype

_NUMBERS = {bool: torch.bool, int: torch.int64, float: torch.float64}
_BYTES_LIKE = (bytes, memoryview)


def collate_samples(samples: list[dict[str, Any]]) -> dict[str, Any]:
    keys = list(samples[0])
    if any(len(s) != len(keys) for s in samples):
        keys = sorted({k for s in samples for k in s})
    return {key: collate_field([s.get(key) for s in samples]) for key in keys}


def collate_field(values: list[Any]) -> Any:
    first = values[0]
    kind = type(first)
    # memoryview: a bin value read as a view of its block (sample_views.py)
    if kind in _BYTES_LIKE and all(type(v) in _BYTES_LIKE for v in values):
        return Ragged.from_bytes(values)
    if any(type(v) is not kind for v in values):
        return [owned(v) for v in values]  # no view of a block leaves as a view
    if kind is np.ndarray:
        return _arrays(values)
    if kind in _NUMBERS:
        return alloc_like(values, _NUMBERS[kind])
    if isinstance(first, np.generic):
        return torch.from_numpy(np.array(values))
    if kind is torch.Tensor:
        return _tensors(values)
    return values


def _arrays(arrays: list[np.ndarray]) -> Any:
    first = arrays[0]
    dtype, shape = first.dtype, first.shape
    if all(a.shape == shape and a.dtype == dtype for a in arrays):
        out = alloc((len(arrays), *shape), torch_dtype(dtype))
        np.stack(arrays, out=out.numpy())
        return out
    if first.ndim >= 1 and all(a.ndim == first.ndim and a.shape[1:] == shape[1:] and a.dtype == dtype for a in arrays):
        return Ragged.from_arrays(arrays)
    return [torch.from_numpy(a.astype(a.dtype.newbyteorder("="))) for a in arrays]  # a native-order copy each


def _tensors(tensors: list[torch.Tensor]) -> Any:
    first = tensors[0]
    if all(t.shape == first.shape and t.dtype == first.dtype for t in tensors):
        return torch.stack(tensors)
    if first.dim() >= 1 and all(t.dim() == first.dim() and t.shape[1:] == first.shape[1:] for t in tensors):
        return Ragged.from_arrays([t.numpy() for t in tensors])
    return tensors
