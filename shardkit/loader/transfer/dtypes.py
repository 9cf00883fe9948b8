"""torch ⇄ numpy dtypes and element counts, cached: they run for every tensor of every batch."""

from __future__ import annotations

import numpy as np
import torch

_NUMPY: dict[torch.dtype, np.dtype | None] = {}
_TORCH: dict[np.dtype, torch.dtype] = {}
_BY_NAME: dict[str, tuple[torch.dtype, int, np.dtype | None]] = {}


def numel(shape: tuple[int, ...]) -> int:
    """Elements in a tensor of ``shape`` (a plain loop: faster than ``math.prod`` for short shapes)."""
    count = 1
    for dim in shape:
        count *= dim
    return count


def numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """numpy's twin of a torch dtype, or None where numpy has none (bfloat16, float8 …)."""
    try:
        return _NUMPY[dtype]
    except KeyError:
        try:
            found: np.dtype | None = torch.empty(0, dtype=dtype).numpy().dtype
        except TypeError:
            found = None
        _NUMPY[dtype] = found
        return found


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype for a numpy dtype (native byte order)."""
    found = _TORCH.get(dtype)
    if found is None:
        found = _TORCH[dtype] = torch.from_numpy(np.empty(0, dtype=dtype.newbyteorder("="))).dtype
    return found


def dtype_name(dtype: torch.dtype) -> str:
    """``"float32"`` for ``torch.float32``: how a dtype is named in a packed batch's layout."""
    return str(dtype).removeprefix("torch.")


def dtype_by_name(name: str) -> tuple[torch.dtype, int, np.dtype | None]:
    """torch dtype, item size and numpy dtype (None where numpy has none) of a ``dtype_name``."""
    found = _BY_NAME.get(name)
    if found is None:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"not a torch dtype: {name!r}")
        found = _BY_NAME[name] = (dtype, dtype.itemsize, numpy_dtype(dtype))
    return found
