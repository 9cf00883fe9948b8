"""Ray Data blocks → shardkit samples, inside a write task.

A ``RowSource`` turns one block (a pyarrow table whose first row is the task's row
``first_row``) into ``(origin, raw)`` pairs and one ``raw``
into a sample dict; ``origin`` names the record in errors and in ``metadata["skipped"]``.

- ``DatasetRows``: any ``ray.data.Dataset`` of dict rows (and ``read_parquet``). Arrow values
  are normalised the way the local Parquet source does it: numeric list columns and Ray tensor
  columns become numpy arrays (one per row, owning its bytes); everything else is
  ``to_pylist()`` (str, int, float, bool, bytes, None, nested lists/dicts).
- ``ItemRows``: the local engine's file-group items, carried as JSON strings and decoded by the
  very same ``sources.to_sample``.
- ``FileRows``: one row per JSONL, Parquet or WebDataset tar file, expanded in the task by the local
  engine's own readers, so samples and origins equal the local engine's exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

import numpy as np

from shardkit.errors import SourceError
from shardkit.write import sources
from shardkit.write.parquet_source import _list_column, iter_parquet

KEY_COLUMNS = ("__key__", "id", "key")


class DatasetRows:
    """Rows of a generic dataset; ``path_column`` (from ``include_paths``) names the origin."""

    def __init__(self, path_column: str | None = None) -> None:
        self.path_column = path_column

    def items(self, table: Any, task_index: int, first_row: int) -> Iterator[tuple[str, Any]]:
        paths: list[Any] | None = None
        if self.path_column and self.path_column in table.column_names:
            paths = table.column(self.path_column).to_pylist()
            table = table.drop([self.path_column])
        for row_index, row in enumerate(arrow_rows(table)):
            where = paths[row_index] if paths is not None else f"task {task_index}"
            yield f"{where}: {_row_name(row, first_row + row_index)}", row

    def sample(self, raw: Any) -> dict[str, Any]:
        return dict(raw)


class ItemRows:
    """File groups: column ``item`` holds ``encode_item(item)``."""

    def items(self, table: Any, task_index: int, first_row: int) -> Iterator[tuple[str, Any]]:
        for text in table.column("item").to_pylist():
            item = decode_item(text)
            yield item.origin, item

    def sample(self, raw: Any) -> dict[str, Any]:
        return sources.to_sample(raw)


class FileRows:
    """Column ``file``: one JSONL, tar or Parquet file per row, read by the local reader."""

    def __init__(self, fmt: str) -> None:
        if fmt not in ("jsonl", "wds", "parquet"):
            raise ValueError(f"FileRows reads jsonl, wds or parquet, not {fmt!r}")
        self.fmt = fmt

    def items(self, table: Any, task_index: int, first_row: int) -> Iterator[tuple[str, Any]]:
        readers: dict[str, Callable[[str], Iterator[sources.Item]]] = {
            "jsonl": sources.iter_jsonl,
            "wds": sources.iter_wds,
            "parquet": iter_parquet,
        }
        read = readers[self.fmt]
        for path in table.column("file").to_pylist():
            for item in read(path):
                yield item.origin, item

    def sample(self, raw: Any) -> dict[str, Any]:
        return sources.parse_jsonl_item(raw) if self.fmt == "jsonl" else sources.to_sample(raw)


def encode_item(item: sources.Item) -> str:
    """A file-group item as JSON (paths only: the bytes are read in the task)."""
    if item.parts or item.row is not None:
        raise ValueError("only path-based items travel as JSON")
    body = asdict(item)
    del body["parts"], body["row"]
    return json.dumps(body, sort_keys=True)


def decode_item(text: str) -> sources.Item:
    body = json.loads(text)
    return sources.Item(origin=body["origin"], key=body["key"], paths=body["paths"], label=body["label"])


def arrow_rows(table: Any) -> list[dict[str, Any]]:
    """The rows of a pyarrow table as dicts of shardkit sample values (see module doc)."""
    import pyarrow as pa

    columns: dict[str, list[Any]] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if isinstance(column.type, pa.ExtensionType) and "tensor" in type(column.type).__name__.lower():
            columns[name] = _tensor_column(column)
        elif pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            columns[name] = _list_column(column)
        else:
            columns[name] = column.to_pylist()
    names = list(columns)
    rows = zip(*columns.values(), strict=True)
    return [dict(zip(names, values, strict=True)) for values in rows] if names else []


def _tensor_column(column: Any) -> list[Any]:
    values = column.to_numpy()
    if values.dtype == object:  # variable-shaped: one array per row already
        return [None if v is None else np.array(v) for v in values]
    return [np.array(values[i]) for i in range(len(values))]


def _row_name(row: dict[str, Any], row_index: int) -> str:
    for key in KEY_COLUMNS:
        value = row.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return f"row {row_index} ({key}={value!r})"
    return f"row {row_index}"


def check_no_samples(num_samples: int, skipped: int, where: str) -> None:
    if num_samples == 0:
        raise SourceError(f"{where}: no samples to pack" + (" (all skipped)" if skipped else ""))
