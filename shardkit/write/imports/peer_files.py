"""File reading shared by the peer-format importers: JSON indexes, shard bytes, offset tables.

Every error is a ``SourceError`` naming the file (and the record where there is one). Every
read is bounded (specs/pack-inputs.md PI10–PI12): only regular files are opened (a FIFO or
device is refused by name, never read), no file larger than the maximum is read, JSON nests at
most ``MAX_NESTING_DEPTH`` deep, and nothing inflates past what the file declares or the maximum.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from shardkit.errors import FormatError, SourceError
from shardkit.format.bounded_json import loads_bounded
from shardkit.format.foreign_zstd import inflate_stream
from shardkit.format.limits import MAX_NESTING_DEPTH
from shardkit.units import parse_size
from shardkit.write.inputs import open_regular

#: PI11: the largest file an importer reads, and the most one shard or chunk may inflate to.
DEFAULT_MAX_IMPORT_BYTES = 1 << 30
#: The environment variable that raises (or lowers) that maximum, e.g. ``4GiB``.
MAX_IMPORT_BYTES_ENV = "SHARDKIT_MAX_IMPORT_BYTES"
#: PI12: the largest JSON index (``index.json``, ``state.json`` …) an importer parses.
MAX_INDEX_BYTES = 128 << 20


def max_import_bytes() -> int:
    """``$SHARDKIT_MAX_IMPORT_BYTES`` when set, else ``DEFAULT_MAX_IMPORT_BYTES``."""
    text = os.environ.get(MAX_IMPORT_BYTES_ENV)
    if not text:
        return DEFAULT_MAX_IMPORT_BYTES
    try:
        value = parse_size(text)
    except (ValueError, OverflowError) as exc:
        raise SourceError(f"${MAX_IMPORT_BYTES_ENV}: {exc}") from None
    if not 0 < value < 1 << 48:
        raise SourceError(f"${MAX_IMPORT_BYTES_ENV} must be a size between 1 byte and 256 TiB, got {text!r}")
    return value


def read_json(path: str, max_depth: int = MAX_NESTING_DEPTH) -> Any:
    """The JSON value of the file ``path`` (at most ``MAX_INDEX_BYTES``, nested at most
    ``max_depth`` deep)."""
    return loads(read_bytes(path, MAX_INDEX_BYTES, "the most a JSON index may have"), path, max_depth)


def read_object(path: str) -> dict[str, Any]:
    """``read_json`` for a file that must hold a JSON object."""
    value = read_json(path)
    if not isinstance(value, dict):
        raise SourceError(f"{path}: must hold a JSON object, got {type(value).__name__}")
    return value


def loads(text: bytes | str, origin: str, max_depth: int = MAX_NESTING_DEPTH) -> Any:
    """A JSON value found inside a peer's file (a column, a leaf, a spec), ``SourceError``
    naming ``origin`` when it is not JSON or nests deeper than ``max_depth``."""
    try:
        return loads_bounded(text, origin, max_depth)
    except FormatError as exc:
        raise SourceError(str(exc)) from None


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


def read_bytes(path: str, limit: int | None = None, why: str = "") -> bytes:
    """The bytes of the regular file ``path``: never a FIFO or device (PI10), never more than
    ``limit`` (default: the maximum, PI11; ``why`` says where a smaller limit comes from)."""
    if limit is None:
        limit, why = max_import_bytes(), f"the maximum; ${MAX_IMPORT_BYTES_ENV} raises it"
    try:
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            data = fh.read(limit + 1) if size <= limit else b""
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
    if size > limit or len(data) > limit:
        raise SourceError(f"{path}: {max(size, len(data))} bytes, more than {limit} ({why})")
    return data


def check_declared(declared: int, origin: str, why: str = "") -> None:
    """Refuse a shard or chunk that declares more bytes than the maximum (PI11), before any read."""
    cap = max_import_bytes()
    if declared > cap:
        raise SourceError(f"{origin}: declares {declared} bytes{f' ({why})' if why else ''}, "
                          f"more than the maximum {cap}; ${MAX_IMPORT_BYTES_ENV} raises it")


def inflate(algo: str, data: bytes, declared: int | None, origin: str, why: str = "") -> bytes:
    """``data`` inflated as ``algo`` (``zstd``, ``gz``, ``bz2``), never past ``declared`` (what
    the file or its index says it inflates to; ``why`` names that) nor the maximum (PI11)."""
    if declared is None:
        declared, why = max_import_bytes(), f"the maximum; ${MAX_IMPORT_BYTES_ENV} raises it"
    check_declared(declared, origin, why)
    try:
        return inflate_stream(algo, data, declared, origin, why)
    except FormatError as exc:
        raise SourceError(str(exc)) from None


def inside(root: str, name: Any, origin: str) -> str:
    """``root/name`` for a file name taken from an index; refuses absolute and ``..`` names."""
    if not isinstance(name, str) or not name or os.path.isabs(name) or ".." in name.split("/"):
        raise SourceError(f"{origin}: unsafe or missing file name {name!r}")
    return os.path.join(root, *name.split("/"))


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
