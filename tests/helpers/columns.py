"""Hypothesis strategies for blocks of uniform samples: what the writer stores as column
blocks (specs/shard-format.md §3a, B2), with every column kind, narrowable and wide integers,
big-endian arrays and empty rows."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

INT_RANGES = [(0, 255), (-128, 127), (0, 65535), (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1), (0, 2**64 - 1)]
ARRAY_DTYPES = ("<i4", "<i8", "<u2", "|u1", "|b1", "<f4", "<f8", ">i4", "<c8", ">u8")


def column_values(kind: str, n: int) -> st.SearchStrategy[list]:
    if kind == "int":
        return st.sampled_from(INT_RANGES).flatmap(lambda r: st.lists(st.integers(*r), min_size=n, max_size=n))
    if kind == "float":
        return st.lists(st.floats(allow_nan=False), min_size=n, max_size=n)
    if kind == "bool":
        return st.lists(st.booleans(), min_size=n, max_size=n)
    if kind == "bytes":
        return st.lists(st.binary(max_size=40), min_size=n, max_size=n)
    if kind == "str":
        return st.lists(st.text(max_size=12), min_size=n, max_size=n)
    tail = hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3)

    def arrays(dtype: str, tail: tuple[int, ...]) -> st.SearchStrategy[list]:
        one = st.integers(0, 6).flatmap(lambda rows: hnp.arrays(np.dtype(dtype), (rows, *tail)))
        return st.lists(one, min_size=n, max_size=n)

    return st.tuples(st.sampled_from(ARRAY_DTYPES), tail).flatmap(lambda d: arrays(*d))


@st.composite
def uniform_blocks(draw: st.DrawFn) -> list[dict]:
    """1–40 samples with the same keys, each field of one column kind (B2)."""
    n = draw(st.integers(1, 40))
    names = draw(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=5, unique=True))
    kinds = draw(st.lists(st.sampled_from(["int", "float", "bool", "bytes", "str", "array"]),
                          min_size=len(names), max_size=len(names)))
    columns = [draw(column_values(kind, n)) for kind in kinds]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


