"""MosaicML Streaming MDS directories → samples (no dependency on ``mosaicml-streaming``).

Layout, as observed in directories written by ``streaming.MDSWriter`` (format version 2)::

    index.json        {"version": 2, "shards": [{"format": "mds", "column_names": [...],
                       "column_encodings": [...], "column_sizes": [n | null, ...],
                       "samples": n, "compression": null | "zstd[:level]" | "gz" | ...,
                       "raw_data": {"basename": ..., "bytes": n}, "zip_data": {...} | null}]}
    shard file        u32 num_samples, u32 offsets[num_samples + 1] (from the file start),
                      then per sample: a u32 size for each column without a fixed size,
                      then the column values in column order

Values keep their types: ``int`` → int, fixed-width scalars → numpy scalars of that dtype,
``ndarray`` → arrays of the stored dtype and shape, ``str``/``bytes``/``json`` as such,
``jpeg``/``png`` → their encoded bytes, ``pil`` → a uint8 array. ``pkl`` columns are refused
(shardkit never unpickles).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shardkit.errors import SourceError
from shardkit.write.imports import mds_values, peer_files
from shardkit.write.sources import Item


@dataclass(frozen=True)
class _Columns:
    names: list[str]
    encodings: list[str]
    sizes: list[int | None]


def is_mds(path: str) -> bool:
    """An ``index.json`` whose shards say ``"format": "mds"``."""
    loaded = peer_files.probe_index(path)
    shards = loaded.get("shards") if loaded is not None else None
    return isinstance(shards, list) and bool(shards) and all(
        isinstance(s, dict) and s.get("format") == "mds" for s in shards
    )


def iter_mds(root: str) -> Iterator[Item]:
    """Every sample of every shard, in index order; ``origin`` names shard file and sample."""
    index_path = os.path.join(root, peer_files.INDEX_NAME)
    index = peer_files.read_json(index_path)
    shards = index.get("shards") if isinstance(index, dict) else None
    if not isinstance(shards, list):
        raise SourceError(f"{index_path}: no 'shards' list (not an MDS index)")
    number = 0
    for shard_index, shard in enumerate(shards):
        origin = f"{index_path}: shard {shard_index}"
        if not isinstance(shard, dict) or shard.get("format") != "mds":
            raise SourceError(f"{origin}: not an MDS shard entry: {shard!r:.80}")
        columns = _columns(shard, origin)
        path, data = _shard_bytes(root, shard, origin)
        count = peer_files.as_int(shard.get("samples"), "samples", origin)
        if peer_files.u32_at(data, 0, path) != count:
            raise SourceError(f"{path}: holds {peer_files.u32_at(data, 0, path)} samples, {index_path} says {count}")
        offsets = peer_files.offset_table(data, count, 4, path)
        for i in range(count):
            where = f"{path}: sample {i}"
            row = _decode(data[offsets[i] : offsets[i + 1]], columns, where)
            yield Item(origin=where, key=str(number), row=row)
            number += 1


def _columns(shard: dict[str, Any], origin: str) -> _Columns:
    names, encodings, sizes = (shard.get(k) for k in ("column_names", "column_encodings", "column_sizes"))
    if not (isinstance(names, list) and isinstance(encodings, list) and isinstance(sizes, list)) or not (
        len(names) == len(encodings) == len(sizes)
    ):
        raise SourceError(f"{origin}: column_names, column_encodings and column_sizes must be lists of one length")
    for name in names:
        if not isinstance(name, str) or not name:
            raise SourceError(f"{origin}: column names must be non-empty strings, got {name!r:.80}")
    if len(set(names)) != len(names):
        raise SourceError(f"{origin}: column names repeat: {names!r:.200}")
    for name, encoding in zip(names, encodings, strict=True):
        mds_values.check_encoding(encoding, f"{origin}: column {name!r}")
    widths = [None if s is None else peer_files.as_int(s, "column size", origin) for s in sizes]
    return _Columns(names, encodings, widths)


def _shard_bytes(root: str, shard: dict[str, Any], origin: str) -> tuple[str, bytes]:
    """The shard's raw bytes: the raw file when it is there, else the zip file inflated, never
    past what ``raw_data.bytes`` declares (PI11). Either must be a regular file (PI10)."""
    raw, zipped = shard.get("raw_data"), shard.get("zip_data")
    if not isinstance(raw, dict):
        raise SourceError(f"{origin}: raw_data missing")
    raw_size = peer_files.as_int(raw.get("bytes"), "raw_data.bytes", origin)
    raw_path = peer_files.inside(root, raw.get("basename"), origin)
    declared = f"{origin} says raw_data.bytes {raw_size}"
    if os.path.exists(raw_path) or not isinstance(zipped, dict):
        peer_files.check_declared(raw_size, raw_path, declared)
        data = peer_files.read_bytes(raw_path, raw_size, declared)
        path = raw_path
    else:
        path = peer_files.inside(root, zipped.get("basename"), origin)
        data = _decompress(str(shard.get("compression") or ""), peer_files.read_bytes(path), raw_size, (path, declared))
    if len(data) != raw_size:
        raise SourceError(f"{path}: {len(data)} bytes of shard data, the index says {raw_size}")
    return path, data


def _decompress(compression: str, data: bytes, raw_size: int, where: tuple[str, str]) -> bytes:
    algo, path = compression.split(":", 1)[0], where[0]
    if algo in ("zstd", "gz", "bz2"):
        return peer_files.inflate(algo, data, raw_size, *where)
    if algo in _OPTIONAL:
        return _decompress_optional(algo, data, raw_size, path)
    raise SourceError(f"{path}: unknown MDS compression {compression!r}")


_OPTIONAL = {"br": ("brotli", "brotli"), "snappy": ("snappy", "python-snappy")}


def _decompress_optional(algo: str, data: bytes, raw_size: int, path: str) -> bytes:
    module_name, package = _OPTIONAL[algo]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise SourceError(f"{path}: reading {algo}-compressed MDS shards needs `pip install {package}`") from None
    if algo == "snappy" and _snappy_length(data, path) != raw_size:  # checked before anything is allocated
        raise SourceError(f"{path}: snappy data declares {_snappy_length(data, path)} bytes, the index says {raw_size}")
    try:
        return bytes(module.decompress(data))
    except Exception as exc:  # each library raises its own error type
        raise SourceError(f"{path}: does not decompress as {algo}: {exc}") from None


def _snappy_length(data: bytes, path: str) -> int:
    """The inflated length a raw snappy block starts with (a little-endian base-128 varint)."""
    value = 0
    for shift, byte in zip(range(0, 35, 7), data, strict=False):
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
    raise SourceError(f"{path}: not a snappy block (no length at its start)")


def _decode(payload: bytes, columns: _Columns, origin: str) -> dict[str, Any]:
    sizes: list[int] = []
    at = 0
    for size in columns.sizes:
        if size is None:
            size = peer_files.u32_at(payload, at, origin)
            at += 4
        sizes.append(size)
    row: dict[str, Any] = {}
    for name, encoding, size in zip(columns.names, columns.encodings, sizes, strict=True):
        if at + size > len(payload):
            raise SourceError(f"{origin}: column {name!r} runs past the end of the sample ({len(payload)} bytes)")
        row[name] = mds_values.decode(encoding, payload[at : at + size], f"{origin}: column {name!r}")
        at += size
    if at != len(payload):
        raise SourceError(f"{origin}: {len(payload) - at} bytes left after the last column")
    return row
