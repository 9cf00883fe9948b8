"""The default collation of samples that are still columns (read/column_pieces.py ``ColumnPiece``).

For column blocks the loader never makes a dict and an array view per sample: a batch is
copied field by field from the blocks' columns into the batch buffer (the ring slot), with one
copy per field and piece when the samples are consecutive (an unshuffled run) and one per
sample otherwise. The batch equals ``collate_samples`` of the same samples as dicts (tested
property, tests/unit/loader/test_column_collation.py): ints → int64, floats → float64, bools →
bool tensors; equal-length arrays stacked, others ``Ragged``; bytes ``Ragged`` of kind bytes;
str a list.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardkit.format.column_parse import offsets_from_lengths
from shardkit.loader.ragged import Ragged, offsets_tensor
from shardkit.loader.transfer.arena import alloc
from shardkit.loader.transfer.dtypes import torch_dtype
from shardkit.read.column_pieces import AnyColumn, ColumnPiece, copy_column_rows, row_lengths, row_views, rows_like

_SCALAR_TORCH = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}


def collate_pieces(pieces: list[ColumnPiece]) -> dict[str, Any] | None:
    """The batch of ``pieces``' samples in order, or None where only the dict path can say
    (columns that differ between pieces, u64 integers that int64 cannot hold)."""
    first = pieces[0]
    if any(p.signature != first.signature for p in pieces[1:]):
        return None
    if any(c.kind == "int" and rows_like(c).dtype.kind == "u" and rows_like(c).dtype.itemsize == 8
           for c in first.columns):
        return None
    batch: dict[str, Any] = {}
    for field, column in enumerate(first.columns):
        parts = [(p.columns[field], p.index) for p in pieces]
        batch[column.name] = _field(column, parts)
    return batch


def _field(column: AnyColumn, parts: list[tuple[AnyColumn, np.ndarray]]) -> Any:
    kind = column.kind
    if kind in _SCALAR_TORCH:
        out = alloc((sum(len(index) for _, index in parts),), _SCALAR_TORCH[kind])
        array, position = out.numpy(), 0
        for part, index in parts:
            array[position : position + len(index)] = rows_like(part)[index]
            position += len(index)
        return out
    if kind == "str":
        return [row.tobytes().decode("utf-8") for part, index in parts for row in row_views(part, index)]
    lengths = np.concatenate([row_lengths(part, index) for part, index in parts])
    like = rows_like(column)
    tail = like.shape[1:]
    dtype = torch.uint8 if kind == "bytes" else torch_dtype(like.dtype)
    if kind == "array" and len(lengths) and (lengths == lengths[0]).all():
        out = alloc((len(lengths), int(lengths[0]), *tail), dtype)
        _copy_rows(parts, out.numpy().reshape(-1, *tail) if out.numel() else None)
        return out
    offsets = offsets_from_lengths(lengths)
    values = alloc((int(offsets[-1]), *tail), dtype)
    _copy_rows(parts, values.numpy() if len(values) else None)
    return Ragged(values, offsets_tensor(offsets), "bytes" if kind == "bytes" else "array")


def _copy_rows(parts: list[tuple[AnyColumn, np.ndarray]], out: np.ndarray | None) -> None:
    """The rows of every part's samples, back to back into ``out``."""
    if out is None:
        return
    position = 0
    for column, index in parts:
        position += copy_column_rows(column, index, out[position:])
