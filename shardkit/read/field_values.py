"""One field of every sample, in manifest order: numbers (per-sample weights,
specs/sample-weights.md) or label codes (shuffle quality, specs/partition.md P14, P20).

One pass over the dataset: every block of every shard is read and decoded once. Column blocks
give a scalar column straight from its array; row blocks go sample by sample. Errors name the
dataset, the shard and the sample.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from shardkit.errors import FormatError, ShardkitError
from shardkit.format.column_parse import Column
from shardkit.read.column_pieces import ColumnPiece, as_samples
from shardkit.read.dataset import StoredDataset, open_dataset
from shardkit.read.options import ReadOptions
from shardkit.read.shard_reader import SampleChunk, ShardReader
from shardkit.read.sources import open_source


class FieldValueError(FormatError):
    """A field that the samples lack, or whose value is not one number."""


class QualityFieldError(ShardkitError, ValueError):
    """A quality field (``--quality FIELD``, ``quality_field=``) the samples lack or cannot
    compare (the CLI's usage exit: 2)."""

    exit_code = 2


def field_values(path: str, field: str, storage_options: dict[str, Any] | None = None) -> np.ndarray:
    """``field`` (one number per sample) of every sample of the dataset at ``path``, as float64 in
    manifest order: e.g. labels to compute class-balanced ``sample_weights`` from. One pass over
    the dataset."""
    return read_numeric_field(open_dataset(path, storage_options), field)


def read_numeric_field(dataset: StoredDataset, field: str) -> np.ndarray:
    """``field`` of every sample as float64, manifest order (one read of the whole dataset)."""
    manifest = dataset.manifest
    if field not in manifest.schema:
        known = ", ".join(sorted(manifest.schema))
        raise FieldValueError(f"{dataset.url}: no field {field!r} in the schema (fields: {known})")
    values = np.empty(manifest.num_samples, dtype=np.float64)
    at = 0
    for info in manifest.shards:
        source = open_source(dataset.store, info.name, info.num_bytes)
        with ShardReader(source, info, options=ReadOptions(views=True)) as reader:
            for chunk in reader.sample_chunks():
                where = f"{dataset.url}: shard {info.name}"
                values[at : at + len(chunk)] = _chunk_values(chunk, field, where, at)
                at += len(chunk)
    return values


def _chunk_values(chunk: SampleChunk, field: str, where: str, first: int) -> np.ndarray:
    if isinstance(chunk, ColumnPiece):
        column = next((c for c in chunk.columns if c.name == field), None)
        if (isinstance(column, Column) and column.offsets is None and column.data.ndim == 1
                and column.data.dtype.kind in "biuf"):
            return np.asarray(column.data[chunk.index], dtype=np.float64)
    samples = as_samples(chunk)
    return np.array([_number(s.get(field), field, where, first + i) for i, s in enumerate(samples)], dtype=np.float64)


def _number(value: Any, field: str, where: str, index: int) -> float:
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0]
    if isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_):
        return float(value)
    raise FieldValueError(
        f"{where}: sample {index} (manifest order): field {field!r} is "
        f"{type(value).__name__} {value!r:.40}; sample weights need one number per sample"
    )


def read_label_codes(dataset: StoredDataset, field: str) -> np.ndarray:
    """One integer code per sample (manifest order, codes in first-seen order) for the values of
    ``field``: what P14's label quality counts (one read of the whole dataset)."""
    if field not in dataset.manifest.schema:
        known = ", ".join(sorted(dataset.manifest.schema))
        raise QualityFieldError(f"{dataset.url}: no field {field!r} in the schema (fields: {known})")
    codes: dict[Any, int] = {}
    labels = np.empty(dataset.manifest.num_samples, dtype=np.int64)
    for index, sample in enumerate(dataset.samples()):
        value = sample.get(field)
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.item()
        try:
            labels[index] = codes.setdefault(value, len(codes))
        except TypeError:
            raise QualityFieldError(
                f"{dataset.url}: sample {index}: field {field!r} is a {type(value).__name__}; "
                f"a quality field needs a scalar label (int, str, bytes)"
            ) from None
    return labels
