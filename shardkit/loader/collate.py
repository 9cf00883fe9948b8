"""Default collation (runs in the worker): a list of sample dicts → one batch dict of tensors.

Per field: equal-shape arrays/tensors → one stacked tensor; numbers/bools → a 1-D tensor;
variable-length arrays (same trailing shape and dtype) and bytes (or memoryviews) → ``Ragged``;
str → list[str]; anything else → a list. Buffers are filled in place (``np.stack(..., out=)``), one copy.
"""

from __future__ import annotations

from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
import torch

from shardkit.format.sample_views import owned
from shardkit.loader.ragged import Ragged
from shardkit.loader.transfer.arena import alloc, alloc_like
from shardkit.loader.transfer.dtypes import torch_dtype

_NUMBERS = {bool: torch.bool, int: torch.int64, float: torch.float64}
_BYTES_LIKE = (bytes, memoryview)


def collate_samples(samples: list[dict[str, Any]]) -> dict[str, Any]:
    keys = list(samples[0])
    if any(len(s) != len(keys) for s in samples):
        keys = sorted({k for s in samples for k in s})
    return {key: collate_field(_field(samples, key)) for key in keys}


def _field(samples: list[dict[str, Any]], key: str) -> list[Any]:
    """``[s.get(key) for s in samples]``, with a C-level loop when every sample has ``key``."""
    try:
        return list(map(itemgetter(key), samples))
    except KeyError:
        return [s.get(key) for s in samples]


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


_SHAPE, _DTYPE = attrgetter("shape"), attrgetter("dtype")


def _arrays(arrays: list[np.ndarray]) -> Any:
    first = arrays[0]
    dtype, shape = first.dtype, first.shape
    one_dtype = len(set(map(_DTYPE, arrays))) == 1  # C-level loops: this runs per field per batch
    shapes = set(map(_SHAPE, arrays))
    if one_dtype and len(shapes) == 1:
        out = alloc((len(arrays), *shape), torch_dtype(dtype))
        np.stack(arrays, out=out.numpy())
        return out
    if one_dtype and first.ndim >= 1 and len({s[1:] if len(s) == first.ndim else None for s in shapes}) == 1:
        return Ragged.from_arrays(arrays)
    return [torch.from_numpy(a.astype(a.dtype.newbyteorder("="))) for a in arrays]  # a native-order copy each


def _tensors(tensors: list[torch.Tensor]) -> Any:
    first = tensors[0]
    if all(t.shape == first.shape and t.dtype == first.dtype for t in tensors):
        return torch.stack(tensors)
    if first.dim() >= 1 and all(t.dim() == first.dim() and t.shape[1:] == first.shape[1:] for t in tensors):
        return Ragged.from_arrays([t.numpy() for t in tensors])
    return tensors
