"""Selections of column-block samples by index, in memory: what a reader hands the loader for a
column block (``ReadOptions(views=True)``) instead of sample dicts.

A ``ColumnPiece`` is samples ``index`` of some parsed columns (format/column_parse.py), without a
Python object per sample: the loader collates a batch straight from pieces
(loader/collate_columns.py), and anything else asks for ``samples()``.

A shuffled window's pieces are joined into one (``join_pieces``) *in place* (specs/read-path.md
RP9): a ragged column becomes a :class:`JoinedColumn` that points into each block's data, so the
window's bytes are copied once, into the batch, not first into a window-sized array. Code that
reads a column's rows goes through ``row_lengths``, ``copy_column_rows`` and ``row_views``, which
take either kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardkit.format.column_parse import SCALARS as SCALAR_KINDS
from shardkit.format.column_parse import Column, offsets_from_lengths, to_samples


def is_run(index: np.ndarray) -> bool:
    """Whether ``index`` is consecutive ascending positions (an unshuffled run)."""
    return bool(len(index)) and int(index[-1]) - int(index[0]) == len(index) - 1 and bool((np.diff(index) == 1).all())


def copy_rows(offsets: np.ndarray, data: np.ndarray, index: np.ndarray, out: np.ndarray) -> int:
    """The rows of samples ``index`` back to back into ``out`` (one copy for a run, one per
    sample otherwise); the number of rows written."""
    if is_run(index):
        start, stop = int(offsets[index[0]]), int(offsets[index[-1] + 1])
        out[: stop - start] = data[start:stop]
        return stop - start
    starts, stops = offsets[index], offsets[index + 1]
    return _concat_into([data[a:b] for a, b in zip(starts.tolist(), stops.tolist(), strict=True)],
                        int((stops - starts).sum()), out)


def _concat_into(rows: list[np.ndarray], total: int, out: np.ndarray) -> int:
    """``rows`` back to back into ``out[:total]`` (``total``: their rows), cast as an assignment
    would; one ``np.concatenate``, not one assignment per sample (about 1.7x faster a batch)."""
    if rows:
        np.concatenate(rows, out=out[:total], casting="unsafe")
    return total


IN_PLACE_SLACK = 256 << 20  # RP9: block bytes a window joined in place may hold beyond 2x its rows'


@dataclass(frozen=True)
class JoinedColumn:
    """A ragged column of several blocks joined without copying its data (RP9): sample ``j``'s
    rows are ``parts[part[j]][starts[j]:ends[j]]``. Every part has the same dtype and row shape
    (the pieces' signatures were checked equal)."""

    name: str
    kind: str
    parts: tuple[np.ndarray, ...]
    part: np.ndarray  # int64, per sample
    starts: np.ndarray  # int64, per sample
    ends: np.ndarray  # int64, per sample

    @property
    def signature(self) -> tuple[Any, ...]:
        return self.name, self.kind, self.parts[0].dtype.str, self.parts[0].shape[1:]


AnyColumn = Column | JoinedColumn


def rows_like(column: AnyColumn) -> np.ndarray:
    """An array of the column's dtype and row shape (its data, or a joined column's first part)."""
    return column.parts[0] if isinstance(column, JoinedColumn) else column.data


def row_lengths(column: AnyColumn, index: np.ndarray) -> np.ndarray:
    """Rows (int64) of each of samples ``index`` of a ragged column."""
    if isinstance(column, JoinedColumn):
        found: np.ndarray = column.ends[index] - column.starts[index]
        return found
    offsets = _ragged(column)
    lengths: np.ndarray = offsets[index + 1] - offsets[index]
    return lengths


def copy_column_rows(column: AnyColumn, index: np.ndarray, out: np.ndarray) -> int:
    """``copy_rows`` for either kind of ragged column; the number of rows written."""
    if not isinstance(column, JoinedColumn):
        return copy_rows(_ragged(column), column.data, index, out)
    parts = column.parts
    return _concat_into([parts[part][a:b] for part, a, b in _joined_rows(column, index)],
                        int((column.ends[index] - column.starts[index]).sum()), out)


def _joined_rows(column: JoinedColumn, index: np.ndarray) -> zip[tuple[int, int, int]]:
    """Per sample of ``index``: its part, first row and end row (plain ints)."""
    return zip(column.part[index].tolist(), column.starts[index].tolist(), column.ends[index].tolist(), strict=True)


def row_views(column: AnyColumn, index: np.ndarray,
              convert: Callable[[np.ndarray], np.ndarray] | None = None) -> list[np.ndarray]:
    """The rows of each of samples ``index`` of a ragged column, as views of its data (of
    ``convert(data)``, per part of a joined column, with ``convert``)."""
    if isinstance(column, JoinedColumn):
        parts = column.parts if convert is None else tuple(convert(part) for part in column.parts)
        return [parts[part][a:b] for part, a, b in _joined_rows(column, index)]
    offsets = _ragged(column)
    data = column.data if convert is None else convert(column.data)
    return [data[a:b] for a, b in zip(offsets[index].tolist(), offsets[index + 1].tolist(), strict=True)]


def _ragged(column: Column) -> np.ndarray:
    if column.offsets is None:
        raise ValueError(f"column {column.name!r} of kind {column.kind} has no offsets")
    return column.offsets


def take(column: AnyColumn, index: np.ndarray) -> Column:
    """The column of samples ``index`` (int64), in that order."""
    if isinstance(column, JoinedColumn):
        offsets = offsets_from_lengths(row_lengths(column, index))
        like = column.parts[0]
        out = np.empty((int(offsets[-1]), *like.shape[1:]), dtype=like.dtype)
        copy_column_rows(column, index, out)
        return Column(column.name, column.kind, out, offsets)
    if column.offsets is None:
        return Column(column.name, column.kind, column.data[index])
    offsets = offsets_from_lengths(column.offsets[index + 1] - column.offsets[index])
    if is_run(index):  # a view, no copy
        start = int(column.offsets[index[0]])
        return Column(column.name, column.kind, column.data[start : start + int(offsets[-1])], offsets)
    out = np.empty((int(offsets[-1]), *column.data.shape[1:]), dtype=column.data.dtype)
    copy_rows(column.offsets, column.data, index, out)
    return Column(column.name, column.kind, out, offsets)


def concat(parts: list[Column]) -> Column:
    """Columns of the same signature, one after the other."""
    first = parts[0]
    if len(parts) == 1:
        return first
    data = np.concatenate([p.data for p in parts], dtype=first.data.dtype)  # keeps ">i4" (SV2)
    ragged = [p.offsets for p in parts if p.offsets is not None]
    if len(ragged) != len(parts):
        return Column(first.name, first.kind, data)
    offsets = np.zeros(sum(len(o) - 1 for o in ragged) + 1, dtype=np.int64)
    at, base = 1, 0
    for part in ragged:
        offsets[at : at + len(part) - 1] = part[1:] + base
        at, base = at + len(part) - 1, base + int(part[-1])
    return Column(first.name, first.kind, data, offsets)


@dataclass(frozen=True)
class ColumnPiece:
    """Samples ``index`` of ``columns``: what a reader gives the loader for a column block
    (``ReadOptions(views=True)``) instead of sample dicts. Sized and sliceable like a list."""

    columns: Sequence[AnyColumn]
    index: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, item: slice) -> ColumnPiece:
        if not isinstance(item, slice):
            raise TypeError("a ColumnPiece is sliced, not indexed; use samples()")
        return ColumnPiece(self.columns, self.index[item])

    @property
    def signature(self) -> tuple[Any, ...]:
        return tuple(c.signature for c in self.columns)

    def select(self, index: np.ndarray) -> ColumnPiece:
        return ColumnPiece(self.columns, self.index[index])

    def taken(self) -> list[Column]:
        return [take(c, self.index) for c in self.columns]

    def samples(self, views: bool = False) -> list[dict[str, Any]]:
        return to_samples(self.taken(), len(self.index), views)


def join_pieces(pieces: list[ColumnPiece], slack: int = IN_PLACE_SLACK) -> ColumnPiece | None:
    """One piece holding ``pieces``' samples in order, or None if their columns differ. Ragged
    columns are joined in place (:class:`JoinedColumn`, RP9) while the blocks they point into
    hold at most twice the rows' bytes plus ``slack``; else, and for scalars, copied."""
    first = pieces[0]
    if len(pieces) == 1:
        return first
    if any(p.signature != first.signature for p in pieces):
        return None
    columns: list[AnyColumn] = []
    for field, column in enumerate(first.columns):
        parts = [(p.columns[field], p.index) for p in pieces]
        joined = _in_place(parts, slack) if column.kind not in SCALAR_KINDS else None
        columns.append(joined if joined is not None else concat([take(c, index) for c, index in parts]))
    return ColumnPiece(columns, np.arange(sum(len(p) for p in pieces), dtype=np.int64))


def _in_place(parts: list[tuple[AnyColumn, np.ndarray]], slack: int) -> JoinedColumn | None:
    """The pieces' ragged column joined in place, or None past the memory bound (RP9)."""
    plain = [(column, index) for column, index in parts if isinstance(column, Column)]
    if len(plain) != len(parts):
        return None
    datas: dict[int, int] = {}  # id(data) -> part number
    arrays: list[np.ndarray] = []
    numbers, starts, ends = [], [], []
    for column, index in plain:
        offsets = _ragged(column)
        number = datas.setdefault(id(column.data), len(arrays))
        if number == len(arrays):
            arrays.append(column.data)
        numbers.append(np.full(len(index), number, dtype=np.int64))
        starts.append(offsets[index])
        ends.append(offsets[index + 1])
    start, end = np.concatenate(starts), np.concatenate(ends)
    row_bytes = arrays[0].itemsize * math.prod(arrays[0].shape[1:])
    held = sum(array.nbytes for array in arrays)
    if held > 2 * int((end - start).sum()) * row_bytes + slack:
        return None
    first = parts[0][0]
    return JoinedColumn(first.name, first.kind, tuple(arrays), np.concatenate(numbers), start, end)


def as_samples(chunk: list[dict[str, Any]] | ColumnPiece, views: bool = False) -> list[dict[str, Any]]:
    """Sample dicts, whether ``chunk`` already is a list of them or a ``ColumnPiece``."""
    return chunk.samples(views) if isinstance(chunk, ColumnPiece) else chunk
