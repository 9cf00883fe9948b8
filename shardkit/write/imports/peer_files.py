"""File reading shared by the peer-format importers: JSON indexes, shard bytes, offset tables.

Every error is a ``SourceError`` naming the file (and the record where there is one).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from shardkit.errors import FormatError, SourceError
from shardkit.format.foreign_zstd import decompress_zstd_stream


def read_json(path: str) -> Any:
    try:
        with open(path, "rb") as fh:
            return json.load(fh)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: not valid JSON: {exc}") from None


INDEX_NAME = "index.json"  # LitData's and MosaicML Streaming's index file both have this name


def probe_index(folder: str) -> dict[str, Any] | None:
    """``folder/index.json`` as a JSON object, or ``None`` when there is none or it is unreadable:
    a format probe is not the place to judge a file that may belong to another format."""
    index = os.path.join(folder, INDEX_NAME)
    if not os.path.isfile(index):
        return None
    try:
        loaded = read_json(index)
    except SourceError:
        return None
    return loaded if isinstance(loaded, dict) else None


def read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None


def inside(root: str, name: Any, origin: str) -> str:
    """``root/name`` for a file name taken from an index; refuses absolute and ``..`` names."""
    if not isinstance(name, str) or not name or os.path.isabs(name) or ".." in name.split("/"):
        raise SourceError(f"{origin}: unsafe or missing file name {name!r}")
    return os.path.join(root, *name.split("/"))


def unzstd(data: bytes, limit: int, origin: str) -> bytes:
    try:
        return decompress_zstd_stream(data, limit, origin)
    except FormatError as exc:
        raise SourceError(str(exc)) from None


def offset_table(data: bytes, count: int, start: int, origin: str) -> list[int]:
    """``count + 1`` little-endian u32 offsets at ``start``, checked to rise within ``data``."""
    end = start + 4 * (count + 1)
    if count < 0 or end > len(data):
        raise SourceError(f"{origin}: offset table for {count} records runs past the end ({len(data)} bytes)")
    offsets = np.frombuffer(data, "<u4", count + 1, start).tolist()
    if offsets[0] < end or offsets[-1] > len(data) or not rising(offsets):
        raise SourceError(f"{origin}: offsets {offsets[0]}..{offsets[-1]} do not fit {len(data)} bytes")
    return offsets


def rising(offsets: list[int] | tuple[int, ...]) -> bool:
    return all(b >= a for a, b in zip(offsets, offsets[1:], strict=False))


def u32_at(data: bytes, offset: int, origin: str) -> int:
    if offset + 4 > len(data):
        raise SourceError(f"{origin}: truncated at byte {offset}")
    return int.from_bytes(data[offset : offset + 4], "little")


def as_int(value: Any, what: str, origin: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SourceError(f"{origin}: {what} must be a non-negative integer, got {value!r}")
    return value
