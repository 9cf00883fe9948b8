"""The token count of every sample's document (specs/token-blocks.md, TB1 and TB6).

``document_lengths(dataset, field)`` is the first-dimension length of the integer array
``field`` of every sample, in manifest order: all that plans token blocks (TB1). When the
writer recorded a length index of the field (specs/manifest.md M10-M13) it is one read of
4 bytes per sample, checked against the manifest's size and xxh64. Otherwise (datasets written
before the index) it reads every block of every shard once, but builds no sample: a column
block's lengths are the differences of the field's row offsets, a row block's come from a
msgpack walk that reads arrays' shapes only (``block_lengths``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardkit.errors import CorruptShardError, FormatError, PlanError
from shardkit.format.column_block import LAYOUT_COLUMNS, decode_block
from shardkit.format.column_parse import parse_columns
from shardkit.format.length_index import block_lengths, decode_lengths, is_document
from shardkit.read.dataset import StoredDataset
from shardkit.read.shard_reader import ShardReader

LENGTH_DTYPE = np.dtype(np.uint32)  # a document of 2**32 tokens or more widens to int64


def _bad(reader: ShardReader, sample: int, field: str, found: str) -> PlanError:
    return PlanError(
        f"{reader.where}: sample {sample}: token field {field!r} {found}; "
        "documents must be integer arrays of at least one dimension"
    )


def _check_array(reader: ShardReader, sample: int, field: str, value: Any) -> int:
    if value is None:
        raise _bad(reader, sample, field, "is missing")
    if not is_document(value):
        shape = f" {value.dtype} of shape {value.shape}" if isinstance(value, np.ndarray) else ""
        raise _bad(reader, sample, field, f"is a {type(value).__name__}{shape}")
    return int(value.shape[0])


def _column_lengths(reader: ShardReader, block: int, raw: bytes | memoryview, field: str) -> np.ndarray:
    n = int(reader.index.blocks[block]["num_samples"])
    first = int(reader.index.first_sample[block])
    for column in parse_columns(raw, n):
        if column.name != field:
            continue
        if column.kind != "array" or column.data.dtype.kind not in "iu" or column.offsets is None:
            raise _bad(reader, first, field, f"is a column of kind {column.kind} ({column.data.dtype})")
        return np.diff(column.offsets)
    raise _bad(reader, first, field, "is missing")


def _block_lengths(reader: ShardReader, block: int, field: str) -> np.ndarray:
    """The lengths of ``field`` in every sample of one block of ``reader``."""
    raw = reader.read_raw_block(block)
    layout = int(reader.index.blocks[block]["layout"])
    try:
        found = block_lengths(raw, reader.index.offsets_of(block), layout).get(field)
    except FormatError as exc:
        raise CorruptShardError(f"{reader.where}: {reader._block_label(block)} does not decode: {exc}") from None
    if found is not None:
        return found
    if layout == LAYOUT_COLUMNS:  # raises: the field is no integer array column
        return _column_lengths(reader, block, raw, field)
    first = int(reader.index.first_sample[block])
    samples = decode_block(
        raw, int(reader.index.blocks[block]["num_samples"]), layout, reader.index.offsets_of(block), views=True
    )
    return np.array(
        [_check_array(reader, first + j, field, s.get(field)) for j, s in enumerate(samples)], dtype=np.int64
    )


def shard_lengths(reader: ShardReader, field: str) -> np.ndarray:
    """The lengths of ``field`` in every sample of one shard, in order (int64)."""
    parts = [_block_lengths(reader, b, field) for b in range(reader.num_blocks)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def narrow_lengths(lengths: np.ndarray) -> np.ndarray:
    """``lengths`` as uint32, or int64 when one of them does not fit."""
    if len(lengths) and int(lengths.max()) > np.iinfo(LENGTH_DTYPE).max:
        return lengths.astype(np.int64)
    return lengths.astype(LENGTH_DTYPE)


def scan_lengths(dataset: StoredDataset, field: str) -> np.ndarray:
    """``document_lengths`` from the shards themselves (int64), ignoring any length index."""
    parts = []
    for i in range(len(dataset.manifest.shards)):
        with dataset.open_shard(i) as reader:
            parts.append(shard_lengths(reader, field))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def read_length_index(dataset: StoredDataset, field: str) -> np.ndarray | None:
    """The length index of ``field`` (uint32, M11), checked; None if the writer recorded none.
    A missing file is a ``NotFoundError``, a wrong one a ``CorruptShardError``, naming it."""
    info = dataset.manifest.lengths_of(field)
    if info is None:
        return None
    return decode_lengths(dataset.store.read(info.name), info, dataset.store.url_of(info.name))


def document_lengths(dataset: StoredDataset, field: str = "tokens") -> np.ndarray:
    """The first-dimension length of the integer array ``field`` of every sample of ``dataset``,
    in manifest order (uint32; int64 if one is 2**32 or more): from the length index when the
    manifest has one for ``field``, else by a scan of the shards. A sample without the field,
    or whose field is not an integer array, is a ``PlanError`` naming the shard and the sample."""
    indexed = read_length_index(dataset, field)
    if indexed is not None:
        return indexed
    return narrow_lengths(scan_lengths(dataset, field))
