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

from shardkit.format.column_parse import Column, offsets_from_lengths
from shardkit.loader.ragged import Ragged, offsets_tensor
from shardkit.loader.transfer.arena import alloc
from shardkit.loader.transfer.dtypes import torch_dtype
from shardkit.read.column_pieces import ColumnPiece, copy_rows

_SCALAR_TORCH = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}


def collate_pieces(pieces: list[ColumnPiece]) -> dict[str, Any] | None:
    """The batch of ``pieces``' samples in order, or None where only the dict path can say
    (columns that differ between pieces, u64 integers that int64 cannot hold)."""
    first = pieces[0]
    if any(p.signature != first.signature for p in pieces[1:]):
        return None
    if any(c.kind == "int" and c.data.dtype.kind == "u" and c.data.dtype.itemsize == 8 for c in first.columns):
        return None
    batch: dict[str, Any] = {}
    for field, column in enumerate(first.columns):
        parts = [(p.columns[field], p.index) for p in pieces]
        batch[column.name] = _field(column, parts)
    return batch


def _field(column: Column, parts: list[tuple[Column, np.ndarray]]) -> Any:
    kind = column.kind
    if kind in _SCALAR_TORCH:
        out = alloc((sum(len(index) for _, index in parts),), _SCALAR_TORCH[kind])
        array, position = out.numpy(), 0
        for part, index in parts:
            array[position : position + len(index)] = part.data[index]
            position += len(index)
        return out
    ragged = [(_offsets(part), part.data, index) for part, index in parts]
    if kind == "str":
        return [data[a:b].tobytes().decode("utf-8") for offsets, data, index in ragged
                for a, b in zip(offsets[index].tolist(), offsets[index + 1].tolist(), strict=True)]
    lengths = np.concatenate([offsets[index + 1] - offsets[index] for offsets, _, index in ragged])
    tail = column.data.shape[1:]
    dtype = torch.uint8 if kind == "bytes" else torch_dtype(column.data.dtype)
    if kind == "array" and len(lengths) and (lengths == lengths[0]).all():
        out = alloc((len(lengths), int(lengths[0]), *tail), dtype)
        _copy_rows(ragged, out.numpy().reshape(-1, *tail) if out.numel() else None)
        return out
    offsets = offsets_from_lengths(lengths)
    values = alloc((int(offsets[-1]), *tail), dtype)
    _copy_rows(ragged, values.numpy() if len(values) else None)
    return Ragged(values, offsets_tensor(offsets), "bytes" if kind == "bytes" else "array")


def _offsets(column: Column) -> np.ndarray:
    if column.offsets is None:
        raise ValueError(f"column {column.name!r} of kind {column.kind} has no offsets")
    return column.offsets


def _copy_rows(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], out: np.ndarray | None) -> None:
    """The rows of every part's samples (offsets, data, index), back to back into ``out``."""
    if out is None:
        return
    position = 0
    for offsets, data, index in parts:
        position += copy_rows(offsets, data, index, out[position:])
