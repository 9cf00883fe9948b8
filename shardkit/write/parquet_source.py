"""Parquet rows as samples (extra ``parquet``). List columns become numpy arrays."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from shardkit.errors import SourceError
from shardkit.write.inputs import check_regular, input_files, shown
from shardkit.write.sources import Item


def _pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SourceError("reading Parquet needs pyarrow: pip install 'shardkit[parquet]'") from None
    return pq


def iter_parquet(path: str, batch_rows: int = 4096) -> Iterator[Item]:
    pq = _pyarrow()
    for file in input_files(path, "parquet"):
        check_regular(file)  # pyarrow opens the file itself: a FIFO would block it
        try:
            reader = pq.ParquetFile(file)
        except Exception as exc:  # pyarrow raises its own ArrowInvalid/OSError family
            raise SourceError(f"{shown(file)}: not a readable Parquet file: {exc}") from None
        row = 0
        for batch in reader.iter_batches(batch_size=batch_rows):
            for sample in _batch_rows(batch):
                yield Item(origin=f"{shown(file)}:row {row}", key=str(row), row=sample)
                row += 1


def _batch_rows(batch: Any) -> list[dict[str, Any]]:
    import pyarrow as pa

    columns: dict[str, list[Any]] = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            columns[name] = _list_column(column)
        elif pa.types.is_floating(column.type) and column.type.bit_width < 64:
            columns[name] = _narrow_float_column(column)
        else:
            columns[name] = column.to_pylist()
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def _narrow_float_column(column: Any) -> list[Any]:
    """float16/float32 values as numpy scalars of that dtype (``to_pylist`` would widen them to
    Python floats, float64); nulls as None."""
    values = list(np.asarray(column.to_numpy(zero_copy_only=False)))
    if not column.null_count:
        return values
    valid = column.is_valid().to_pylist()
    return [value if ok else None for value, ok in zip(values, valid, strict=True)]


def _list_column(column: Any) -> list[Any]:
    """One numpy array per row (a slice of the flat values; copies so rows own their bytes)."""
    flat = column.flatten()
    if flat.null_count:
        return column.to_pylist()
    values = np.asarray(flat.to_numpy(zero_copy_only=False))
    if values.dtype.kind not in "biuf":
        return column.to_pylist()
    offsets = np.asarray(column.offsets)
    base = int(offsets[0])
    valid = column.is_valid().to_pylist() if column.null_count else None
    return [
        None if valid is not None and not valid[i] else values[offsets[i] - base : offsets[i + 1] - base].copy()
        for i in range(len(column))
    ]
