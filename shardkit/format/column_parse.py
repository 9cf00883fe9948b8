"""Parsing column blocks (column_block.py, specs/shard-format.md §3a) into arrays, and samples
from them: bytes → objects.

``parse_columns`` checks a raw column block and returns its columns as numpy arrays (integer
data widened back to its written dtype); ``to_samples`` makes sample dicts of whole columns.
Selections of samples by index (``ColumnPiece``) are the reader's: read/column_pieces.py.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import msgpack
import numpy as np

from shardkit.errors import FormatError

HEAD = struct.Struct("<I")
OFFSETS = np.dtype("<u4")
SCALARS = ("int", "float", "bool")
DTYPE = re.compile(r"[<>|=][biufc][0-9]{1,2}")


def offsets_from_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """int64 ``(n + 1,)``: 0, then the running sums of ``lengths``; item ``i`` spans
    ``[offsets[i], offsets[i + 1])`` — the one way offsets of a ragged sequence are made."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


@dataclass(frozen=True)
class Column:
    """``data``: n scalars, or the bytes (uint8) / rows (``(rows, *tail)``) of all samples, which
    sample ``j`` finds at ``offsets[j]:offsets[j+1]`` (int64, n + 1)."""

    name: str
    kind: str
    data: np.ndarray
    offsets: np.ndarray | None = None

    @property
    def signature(self) -> tuple[Any, ...]:
        return self.name, self.kind, self.data.dtype.str, self.data.shape[1:]


def _segment(block: bytes | memoryview, start: Any, length: int, what: str) -> memoryview:
    if type(start) is not int or type(length) is not int or start < 0 or length < 0 or start + length > len(block):
        raise FormatError(f"column {what} segment [{start}, +{length}) is outside the {len(block)}-byte block")
    return memoryview(block)[start : start + length]


def _offsets(block: bytes | memoryview, column: dict[str, Any], n: int, total: int) -> np.ndarray:
    view = _segment(block, column["offsets"], (n + 1) * OFFSETS.itemsize, f"{column['name']!r} offsets")
    offsets = np.frombuffer(view, dtype=OFFSETS).astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != total or (np.diff(offsets) < 0).any():
        raise FormatError(f"column {column['name']!r}: offsets do not run from 0 to {total}")
    return offsets


def _dtype(text: Any, name: Any) -> np.dtype:
    """A column's dtype as the writer spells it (``dtype.str`` of a numeric type, e.g. ``<i4``); anything else is
    damage, refused before numpy parses it (numpy accepts, or warns about, far more spellings)."""
    if type(text) is not str or DTYPE.fullmatch(text) is None:
        raise FormatError(f"column {name!r}: dtype {text!r} is not a numeric dtype")
    return np.dtype(text)


def _parse(block: bytes | memoryview, column: dict[str, Any], n: int, widen: bool = True) -> Column:
    kind, name = column["kind"], column["name"]
    dtype, as_dtype = _dtype(column["dtype"], name), _dtype(column["as"], name)
    start, length = column["data"]
    data = _segment(block, start, length, repr(name))
    if kind in SCALARS:
        if length != n * dtype.itemsize or (kind == "int") != (dtype.kind in "iu"):
            raise FormatError(f"column {name!r}: {length} bytes of {dtype} for {n} {kind} values")
        values = np.frombuffer(data, dtype=dtype)
        if kind == "int":  # narrowed per block (B3): widened so that every block's column matches
            values = values.astype(np.uint64 if dtype.kind == "u" and dtype.itemsize == 8 else np.int64)
        return Column(name, kind, values)
    if kind in ("bytes", "str"):
        return Column(name, kind, np.frombuffer(data, dtype=np.uint8), _offsets(block, column, n, length))
    if kind != "array" or dtype.kind not in "biufc" or as_dtype.kind not in "biufc":
        raise FormatError(f"column {name!r}: unknown kind {kind!r} or dtype {dtype}")
    tail = tuple(column["tail"])
    if any(type(d) is not int or d <= 0 for d in tail):
        raise FormatError(f"column {name!r}: bad row shape {tail}")
    row = math.prod(tail)  # exact: a hostile tail such as [2**32, 2**32] must not wrap to 0
    if length and row * dtype.itemsize > length:
        raise FormatError(f"column {name!r}: row shape {tail} of {dtype} is larger than its {length}-byte data")
    offsets = _offsets(block, column, n, length // (row * dtype.itemsize))
    if int(offsets[-1]) * row * dtype.itemsize != length:
        raise FormatError(f"column {name!r}: {length} bytes is not {offsets[-1]} rows of {tail} {dtype}")
    flat = np.ndarray((int(offsets[-1]), *tail), dtype, data)
    if dtype != as_dtype and widen:
        if dtype.kind not in "iu" or as_dtype.kind not in "iu":
            raise FormatError(f"column {name!r}: {dtype} cannot widen to {as_dtype}")
        flat = flat.astype(as_dtype)
        flat.flags.writeable = False
    return Column(name, kind, flat, offsets)


# SyntaxError: numpy parses a dtype string like "01" as a Python literal
_MALFORMED = (KeyError, TypeError, ValueError, SyntaxError, struct.error, msgpack.UnpackException)


def _format_error(exc: Exception) -> FormatError:
    if isinstance(exc, FormatError):
        return exc
    return FormatError(f"malformed column block: {type(exc).__name__}: {exc}")


def parse_header(block: bytes | memoryview, expected: int) -> list[dict[str, Any]]:
    """The column descriptions of a raw column block of ``expected`` samples (names checked)."""
    (size,) = HEAD.unpack_from(block, 0)
    header = msgpack.unpackb(_segment(block, HEAD.size, size, "header"), raw=False, strict_map_key=True)
    n, columns = header["n"], header["columns"]
    if n != expected:
        raise FormatError(f"column block holds {n} samples, index says {expected}")
    names = [column["name"] for column in columns]
    if len(set(names)) != len(names) or not all(type(name) is str for name in names):
        raise FormatError(f"column names {names!r} are not distinct strings")
    return list(columns)


def parse_columns(block: bytes | memoryview, expected: int) -> list[Column]:
    """The checked columns of a raw column block of ``expected`` samples (B2, B5)."""
    try:
        return [_parse(block, column, expected) for column in parse_header(block, expected)]
    except _MALFORMED as exc:
        raise _format_error(exc) from None


def array_lengths(block: bytes | memoryview, expected: int) -> dict[str, np.ndarray]:
    """The first-dimension length in each sample (int64) of every integer array column of a
    raw column block: its row offsets, checked, without widening the data."""
    found = {}
    try:
        for column in parse_header(block, expected):
            if column["kind"] == "array" and np.dtype(column["dtype"]).kind in "iu":
                offsets = _parse(block, column, expected, widen=False).offsets
                found[column["name"]] = np.diff(offsets) if offsets is not None else np.zeros(0, np.int64)
    except _MALFORMED as exc:
        raise _format_error(exc) from None
    return found


# ---- samples ----------------------------------------------------------------------------------
def _slices(values: Any, offsets: np.ndarray) -> list[Any]:
    bounds = offsets.tolist()
    return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _values(column: Column, views: bool) -> list[Any]:
    if column.kind in SCALARS:
        return column.data.tolist()
    offsets = column.offsets
    if offsets is None:
        raise FormatError(f"column {column.name!r} of kind {column.kind} has no offsets")
    if column.kind == "bytes":
        return _slices(column.data.data, offsets) if views else _slices(column.data.tobytes(), offsets)
    if column.kind == "str":
        return [piece.decode("utf-8") for piece in _slices(column.data.tobytes(), offsets)]
    lengths = np.diff(offsets)
    n = len(lengths)
    if n and (lengths == lengths[0]).all():
        return list(column.data.reshape(n, int(lengths[0]), *column.data.shape[1:]))  # views made in C
    return _slices(column.data, offsets)


def records(names: list[str], values: list[list[Any]], n: int) -> list[dict[str, Any]]:
    """Sample dicts from column values; dict displays are ~4× cheaper than ``dict(zip(…))``."""
    if len(names) == 1:
        (k0,), (v0,) = names, values
        return [{k0: a} for a in v0]
    # Every column has n values (checked by parse_columns); zip(strict=True) doubles the cost.
    if len(names) == 2:
        k0, k1 = names
        return [{k0: a, k1: b} for a, b in zip(*values, strict=False)]
    if len(names) == 3:
        k0, k1, k2 = names
        return [{k0: a, k1: b, k2: c} for a, b, c in zip(*values, strict=False)]
    if not names:
        return [{} for _ in range(n)]
    return list(map(dict, map(zip, repeat(names), zip(*values, strict=False))))


def to_samples(columns: list[Column], n: int, views: bool = False) -> list[dict[str, Any]]:
    """The sample dicts of whole columns (``views``: bytes fields as memoryviews of the block)."""
    return records([c.name for c in columns], [_values(c, views) for c in columns], n)
