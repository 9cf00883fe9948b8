"""Hypothesis strategies for samples, and an exact equality check for decoded samples.

Every value type of the sample codec (specs/shard-format.md §5) is covered: None, bool, 64-bit
ints, floats, str, bytes, nested lists/dicts, numpy arrays (several dtypes, 0-d and empty
shapes, non-contiguous and big-endian ones), numpy scalars and CPU torch tensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

ARRAY_DTYPES = ("<i4", "<f8", "|b1", "|u1", "<i8", "<f4", "<f2", ">i4", "<c8")
TENSOR_DTYPES = ("<i4", "<f8", "|b1", "|u1", "<i8", "<f4")
SCALAR_DTYPES = ("<i4", "<f8", "|b1", "<u2", "<f4", "<i8")

shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def arrays(dtypes: tuple[str, ...] = ARRAY_DTYPES) -> st.SearchStrategy[np.ndarray]:
    plain = st.sampled_from(dtypes).flatmap(lambda d: hnp.arrays(np.dtype(d), shapes))
    # A strided view: the codec must store it C-contiguous.
    strided = hnp.arrays(np.dtype("<i4"), st.tuples(st.integers(0, 4), st.integers(0, 6))).map(
        lambda a: a[:, ::2]
    )
    return st.one_of(plain, strided)


def tensors() -> st.SearchStrategy[Any]:
    def to_tensor(array: np.ndarray) -> Any:
        tensor = torch.from_numpy(array.copy())
        return tensor.t() if tensor.ndim == 2 else tensor  # non-contiguous when 2-d

    return arrays(TENSOR_DTYPES).filter(lambda a: a.dtype.byteorder != ">").map(to_tensor)


def np_scalars() -> st.SearchStrategy[np.generic]:
    return st.sampled_from(SCALAR_DTYPES).flatmap(
        lambda d: hnp.from_dtype(np.dtype(d), allow_nan=False).map(np.dtype(d).type)
    )


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.binary(max_size=24),
)
leaves = st.one_of(scalars, arrays(), np_scalars(), tensors())
field_names = st.text(min_size=1, max_size=6)
values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.dictionaries(field_names, children, max_size=3),
    ),
    max_leaves=6,
)
samples = st.dictionaries(field_names, values, min_size=0, max_size=5)


def assert_value_equal(got: Any, want: Any, path: str = "$") -> None:
    """``got`` (decoded) equals ``want`` (written) exactly: type, dtype, shape and bytes."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{path}: expected a tensor, got {type(got)}"
        assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), path
        assert got.numpy().tobytes() == want.contiguous().numpy().tobytes(), path
    elif isinstance(want, np.ndarray):
        assert type(got) is np.ndarray, f"{path}: expected ndarray, got {type(got)}"
        assert got.dtype == want.dtype and got.shape == want.shape, (
            f"{path}: {got.dtype}{got.shape}"
        )
        assert got.tobytes() == np.ascontiguousarray(want).tobytes(), path
    elif isinstance(want, np.generic):
        assert type(got) is type(want), f"{path}: expected {type(want)}, got {type(got)}"
        assert got.tobytes() == want.tobytes(), path
    elif isinstance(want, dict):
        assert type(got) is dict and list(got) == list(want), (
            f"{path}: keys {list(got)} != {list(want)}"
        )
        for key in want:
            assert_value_equal(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, (list, tuple)):
        assert type(got) is list and len(got) == len(want), f"{path}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_value_equal(g, w, f"{path}[{i}]")
    else:
        assert type(got) is type(want) and got == want, f"{path}: {got!r} != {want!r}"
