"""Selections of column-block samples by index, in memory: what a reader hands the loader for a
column block (``ReadOptions(views=True)``) instead of sample dicts.

A ``ColumnPiece`` is samples ``index`` of some parsed columns (format/column_parse.py), without a
Python object per sample: the loader collates a batch straight from pieces
(loader/collate_columns.py), and anything else asks for ``samples()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

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
    position = 0
    for start, stop in zip(offsets[index].tolist(), offsets[index + 1].tolist(), strict=True):
        out[position : position + stop - start] = data[start:stop]
        position += stop - start
    return position


def take(column: Column, index: np.ndarray) -> Column:
    """The column of samples ``index`` (int64), in that order."""
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

    columns: list[Column]
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


def join_pieces(pieces: list[ColumnPiece]) -> ColumnPiece | None:
    """One piece holding ``pieces``' samples in order, or None if their columns differ."""
    first = pieces[0]
    if len(pieces) == 1:
        return first
    if any(p.signature != first.signature for p in pieces):
        return None
    columns = [concat(list(parts)) for parts in zip(*(p.taken() for p in pieces), strict=True)]
    return ColumnPiece(columns, np.arange(sum(len(p) for p in pieces), dtype=np.int64))


def as_samples(chunk: list[dict[str, Any]] | ColumnPiece, views: bool = False) -> list[dict[str, Any]]:
    """Sample dicts, whether ``chunk`` already is a list of them or a ``ColumnPiece``."""
    return chunk.samples(views) if isinstance(chunk, ColumnPiece) else chunk
