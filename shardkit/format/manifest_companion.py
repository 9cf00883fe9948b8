"""``manifest.bin``: a compact binary companion of a large ``manifest.json`` (specs/manifest.md §7).

The JSON stays the human-readable source of truth. The companion holds the same manifest as
numpy columns, so a reader opens a dataset of 1e5 shards in milliseconds and a few MiB instead
of parsing ~20 MB of JSON into ~100 MiB of Python objects. It is bound to one exact JSON: its
header records the xxh64 of the ``manifest.json`` bytes it was written with (M15), and a reader
uses it only when that matches the JSON it holds; otherwise it parses the JSON.

Layout (little-endian)::

    0   4  magic b"SKMB"
    4   2  u16 version (1)
    6   2  u16 reserved (0)
    8   8  u64 num_shards N
    16  8  u64 xxh64 of the manifest.json bytes this companion describes
    24  8  u64 H: bytes of the head (the manifest object without "shards", UTF-8 JSON)
    32  H  head, then zero padding to a multiple of 8
        6 × N × 8   columns num_samples, num_bytes, num_blocks, raw_bytes, index_bytes (int64)
                    and checksum (uint64, the 16 hex digits of "xxh64:…")
        …           names: every shard name followed by "\\n" (ASCII)
    -8  8  u64 xxh64 of every byte before it
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import xxhash

from shardkit.errors import ManifestError
from shardkit.format.manifest import (
    FORMAT_NAME,
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    canonical_json,
    check_version,
    manifest_order,
    with_lengths,
)
from shardkit.format.schema import validate_schema

COMPANION_NAME = "manifest.bin"
#: A writer adds the companion when ``manifest.json`` is at least this long; a reader looks
#: for it from the same size (below it the JSON opens in milliseconds anyway).
COMPANION_MIN_BYTES = 1 << 20
MAGIC = b"SKMB"
VERSION = 1
_SLICE = 8192  # entries formatted at a time by fast_fingerprint
COLUMNS = ("num_samples", "num_bytes", "num_blocks", "raw_bytes", "index_bytes", "checksum")
_HEADER = struct.Struct("<4sHHQQQ")
_PART = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_NAME = _PART + "(?:/" + _PART + ")?"  # M3, as manifest.py's check_shard_name, without backtracking
_NAMES = re.compile(rb"(?:" + _NAME.encode() + rb"\n)*")


class ShardTable(Sequence[ShardInfo]):
    """The shard entries of a manifest as columns; ``ShardInfo`` objects are made on access."""

    def __init__(self, columns: dict[str, np.ndarray], names: list[str]) -> None:
        self._columns = columns
        self._names = names

    def column(self, key: str) -> np.ndarray:
        """One column (``num_samples`` … ``checksum``), read-only."""
        return self._columns[key]

    @property
    def names(self) -> list[str]:
        return self._names

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, index: int) -> ShardInfo: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[ShardInfo, ...]: ...

    def __getitem__(self, index: int | slice) -> ShardInfo | tuple[ShardInfo, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        c = self._columns
        return ShardInfo(self._names[index], int(c["num_samples"][index]), int(c["num_bytes"][index]),
                         int(c["num_blocks"][index]), int(c["raw_bytes"][index]),
                         int(c["index_bytes"][index]), f"xxh64:{int(c['checksum'][index]):016x}")

    def __iter__(self) -> Iterator[ShardInfo]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]


def encode_companion(json_bytes: bytes) -> bytes:
    """The companion of the manifest whose JSON body is ``json_bytes`` (a writer's ``to_json()``)."""
    head = json.loads(json_bytes)
    shards = head.pop("shards")
    head_bytes = json.dumps(head, ensure_ascii=False).encode()
    parts = [_HEADER.pack(MAGIC, VERSION, 0, len(shards), xxhash.xxh64_intdigest(json_bytes), len(head_bytes)),
             head_bytes, b"\0" * (-len(head_bytes) % 8)]
    for key in COLUMNS[:-1]:
        parts.append(np.array([s[key] for s in shards], dtype="<i8").tobytes())
    parts.append(np.array([int(s["checksum"][6:], 16) for s in shards], dtype="<u8").tobytes())
    parts.append("".join(s["name"] + "\n" for s in shards).encode("ascii"))
    body = b"".join(parts)
    return body + struct.pack("<Q", xxhash.xxh64_intdigest(body))


def decode_companion(data: bytes, json_checksum: str, where: str = COMPANION_NAME) -> Manifest:
    """The manifest in companion ``data``, checked (M3–M6, M15) against ``json_checksum``
    (``"xxh64:…"`` of the manifest.json it must describe); a ``ManifestError`` naming ``where``
    otherwise."""
    view = memoryview(data)
    if len(view) < _HEADER.size + 8 or struct.unpack_from("<Q", view, len(view) - 8)[0] != \
            xxhash.xxh64_intdigest(view[:-8]):
        raise ManifestError(f"{where}: damaged (its checksum does not match its bytes)")
    magic, version, _, count, bound, head_len = _HEADER.unpack_from(view)
    if magic != MAGIC or version != VERSION:
        raise ManifestError(f"{where}: not a version-{VERSION} manifest companion (magic {magic!r}, version {version})")
    if f"xxh64:{bound:016x}" != json_checksum:
        raise ManifestError(f"{where}: describes another manifest.json (xxh64:{bound:016x}, the JSON's is "
                            f"{json_checksum}): left by an interrupted or replaced writer")
    start = _HEADER.size + head_len + (-head_len % 8)
    end = start + 8 * len(COLUMNS) * count
    if end > len(view) - 8:
        raise ManifestError(f"{where}: {count} shards do not fit in {len(view)} bytes")
    head = _head(bytes(view[_HEADER.size:_HEADER.size + head_len]), where)
    columns = {key: np.frombuffer(view, "<u8" if key == "checksum" else "<i8", count, start + 8 * count * i)
               for i, key in enumerate(COLUMNS)}
    names = _names(bytes(view[end:-8]), count, where)
    table = ShardTable(columns, names)
    _check_counts(table, where)
    manifest = Manifest(shards=table, schema=validate_schema(head.get("schema"), where),
                        metadata=head.get("metadata", {}), created_by=str(head.get("created_by", "")),
                        fingerprint=str(head.get("fingerprint", "")), order=manifest_order(head.get("order"), where))
    if not isinstance(manifest.metadata, dict):
        raise ManifestError(f"{where}: 'metadata' must be an object")
    if manifest.fingerprint != fast_fingerprint(manifest):
        raise ManifestError(f"{where}: fingerprint {manifest.fingerprint!r} does not match contents")
    if head.get("num_samples") != manifest.num_samples or head.get("num_bytes") != manifest.num_bytes:
        raise ManifestError(f"{where}: num_samples/num_bytes do not add up over the shards")
    return with_lengths(manifest, head.get("lengths"), where)  # the length index entries (M14)


def fast_fingerprint(manifest: Manifest) -> str:
    """``manifest.compute_fingerprint()`` without per-entry JSON encoding: M3 names need no
    escaping and checksums are hex, so the canonical text is formatted directly, and hashed in
    slices of ``_SLICE`` entries (memory stays small whatever the shard count)."""
    table = manifest.shards
    if not isinstance(table, ShardTable):
        return manifest.compute_fingerprint()
    hasher = xxhash.xxh3_128()
    hasher.update(b'{"schema":' + canonical_json(manifest.schema) + b',"shards":[')
    names, counts, checksums = table.names, table.column("num_samples"), table.column("checksum")
    for lo in range(0, len(table), _SLICE):
        hi = min(lo + _SLICE, len(table))
        hexes = checksums[lo:hi].astype(">u8").tobytes().hex()
        args = [v for entry in zip(names[lo:hi], counts[lo:hi].tolist(),
                                   [hexes[i:i + 16] for i in range(0, 16 * (hi - lo), 16)], strict=True)
                for v in entry]
        text = ('["%s",%d,"xxh64:%s"],' * (hi - lo)) % tuple(args)  # one C-level pass per slice
        hasher.update((text if hi < len(table) else text[:-1]).encode())
    hasher.update(b"]}")
    return "xxh3-128:" + hasher.hexdigest()


def _head(raw: bytes, where: str) -> dict[str, Any]:
    try:
        head = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"{where}: head is not UTF-8 JSON: {exc}") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT_NAME:
        raise ManifestError(f"{where}: head is not a shardkit manifest")
    check_version(head.get("format_version"), where)
    return head


def _names(blob: bytes, count: int, where: str) -> list[str]:
    """M3 for every name at once (one regular-expression pass), and uniqueness."""
    if not _NAMES.fullmatch(blob) or b".." in blob or (b"\n" + blob).find(b"\n" + MANIFEST_NAME.encode() + b"\n") >= 0:
        raise ManifestError(f"{where}: an unsafe shard name (must be 'file' or 'folder/file' of [A-Za-z0-9._-], "
                            "no '..', never manifest.json)")
    names = blob.decode("ascii").split("\n")[:-1]
    if len(names) != count:
        raise ManifestError(f"{where}: {len(names)} shard names for {count} shards")
    if len(set(names)) != count:
        raise ManifestError(f"{where}: shard names repeat")
    return names


def _check_counts(table: ShardTable, where: str) -> None:
    """M4: counts in [0, 2**63) (int64 and non-negative) and ``index_bytes <= num_bytes``."""
    for key in COLUMNS[:-1]:
        bad = np.flatnonzero(table.column(key) < 0)
        if len(bad):
            raise ManifestError(f"{where}: shards[{bad[0]}]: {key} must be in [0, 2**63)")
    over = np.flatnonzero(table.column("index_bytes") > table.column("num_bytes"))
    if len(over):
        raise ManifestError(f"{where}: shards[{over[0]}]: index_bytes > num_bytes")
