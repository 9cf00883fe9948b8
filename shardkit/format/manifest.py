"""``manifest.json``: the dataset's table of contents (specs/manifest.md).

The manifest is written last (atomically) and names every shard with its sample count, size,
index size and whole-file checksum. The fingerprint is xxh3-128 over the canonical JSON of the
schema and the (name, num_samples, checksum) of every shard, so it changes whenever any byte of
the data changes and is the same for the same bytes (M5).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shardkit.errors import ManifestError, UnsupportedVersionError
from shardkit.format.checksum import check_checksum_text, fingerprint_text
from shardkit.format.length_index import LengthsInfo
from shardkit.format.schema import validate_schema

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "shardkit"
FORMAT_VERSION = (1, 1)
# One optional folder level, then a file name; no dot-files, no "..", no control characters.
MAX_COUNT = 1 << 63  # M4: counts and sizes are below 2**63 (they become int64 in plans)
_MAX_INT_DIGITS = 20
_SAFE_NAME = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}/)?[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


def check_shard_name(name: Any, where: str = MANIFEST_NAME) -> str:
    """M3: a shard name is relative, at most one folder deep, and free of ``..`` and controls."""
    # fullmatch, not match: "$" would accept a trailing newline.
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or ".." in name or name == MANIFEST_NAME:
        raise ManifestError(
            f"{where}: unsafe shard name {name!r} (must be 'file' or 'folder/file' of "
            "[A-Za-z0-9._-], no '..', no absolute path, no control characters)"
        )
    return name


@dataclass(frozen=True)
class ShardInfo:
    name: str
    num_samples: int
    num_bytes: int
    num_blocks: int
    raw_bytes: int
    index_bytes: int  # index + footer: the suffix a reader fetches in one request
    checksum: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_samples": self.num_samples,
            "num_bytes": self.num_bytes,
            "num_blocks": self.num_blocks,
            "raw_bytes": self.raw_bytes,
            "index_bytes": self.index_bytes,
            "checksum": self.checksum,
        }

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> ShardInfo:
        if not isinstance(raw, dict):
            raise ManifestError(f"{where}: a shard entry must be an object, got {type(raw).__name__}")
        try:
            info = cls(
                name=check_shard_name(raw["name"], where),
                num_samples=_count(raw, "num_samples", where),
                num_bytes=_count(raw, "num_bytes", where),
                num_blocks=_count(raw, "num_blocks", where),
                raw_bytes=_count(raw, "raw_bytes", where),
                index_bytes=_count(raw, "index_bytes", where),
                checksum=check_checksum_text(raw["checksum"], where),
            )
        except KeyError as exc:
            raise ManifestError(f"{where}: shard entry lacks {exc.args[0]!r}") from None
        if info.index_bytes > info.num_bytes:
            raise ManifestError(f"{where}: index_bytes {info.index_bytes} > num_bytes {info.num_bytes}")
        return info


def _count(raw: dict[str, Any], key: str, where: str) -> int:
    value = raw[key]
    if type(value) is not int or not 0 <= value < MAX_COUNT:
        raise ManifestError(f"{where}: {key} must be an integer in [0, 2**63), got {value!r}")
    return value


def _parse_int(text: str) -> int:
    """M4: JSON integers of at most 20 digits (a u64); longer ones are refused unparsed."""
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ManifestError(f"integer literal of {len(text)} characters (at most {_MAX_INT_DIGITS} digits, M4)")
    return int(text)


@dataclass(frozen=True)
class Manifest:
    shards: Sequence[ShardInfo]  # a tuple, or a ``ShardTable`` of columns (manifest_companion.py)
    schema: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)
    created_by: str = ""
    fingerprint: str = ""
    order: dict[str, Any] | None = None  # M9: how the samples were ordered; None = not recorded
    lengths: tuple[LengthsInfo, ...] = ()  # M10: per-sample length indexes, by field

    def lengths_of(self, field_name: str) -> LengthsInfo | None:
        """The length index of ``field_name`` (M10), if the writer recorded one."""
        return next((entry for entry in self.lengths if entry.field == field_name), None)

    @property
    def num_samples(self) -> int:
        return self._total("num_samples")

    @property
    def num_bytes(self) -> int:
        return self._total("num_bytes")

    @property
    def raw_bytes(self) -> int:
        return self._total("raw_bytes")

    @property
    def shard_sizes(self) -> list[int]:
        column = getattr(self.shards, "column", None)  # a ShardTable: no per-shard objects
        return column("num_samples").tolist() if column else [s.num_samples for s in self.shards]

    def _total(self, key: str) -> int:
        column = getattr(self.shards, "column", None)
        if column is not None:
            return sum(column(key).tolist())  # Python ints: a sum never wraps at 2**63
        return sum(getattr(s, key) for s in self.shards)

    def compute_fingerprint(self) -> str:
        body = {"schema": self.schema, "shards": [[s.name, s.num_samples, s.checksum] for s in self.shards]}
        return fingerprint_text(canonical_json(body))

    def to_json(self) -> bytes:
        body = {**json_head(self, self.compute_fingerprint()), "shards": [s.to_dict() for s in self.shards]}
        return (json.dumps(body, indent=JSON_INDENT, sort_keys=False, ensure_ascii=False) + "\n").encode()


#: ``manifest.json`` is ``json.dumps(body, indent=JSON_INDENT, ensure_ascii=False) + "\n"`` of
#: ``json_head`` followed by ``"shards"`` (a companion is checked against exactly this text, M20).
JSON_INDENT = 1


def json_head(manifest: Manifest, fingerprint: str) -> dict[str, Any]:
    """The keys of ``manifest.json`` before ``"shards"``, in the order a writer writes them."""
    return {
        "format": FORMAT_NAME,
        "format_version": f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}",
        "fingerprint": fingerprint,
        "created_by": manifest.created_by,
        "num_samples": manifest.num_samples,
        "num_bytes": manifest.num_bytes,
        "raw_bytes": manifest.raw_bytes,
        "num_shards": len(manifest.shards),
        "schema": manifest.schema,
        "metadata": manifest.metadata,
        **({} if manifest.order is None else {"order": manifest.order}),
        **({"lengths": [entry.to_dict() for entry in manifest.lengths]} if manifest.lengths else {}),
    }


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def decode_manifest(data: bytes, where: str = MANIFEST_NAME) -> Manifest:
    """Parse and validate a manifest (M1–M6); raises ``ManifestError`` naming ``where``."""
    try:
        text = data.decode("utf-8")  # M1: UTF-8 only (json.loads would also guess UTF-16/32)
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{where}: not UTF-8 (M1): {exc}") from None
    try:
        raw = json.loads(text, parse_int=_parse_int)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, ManifestError):
            raise ManifestError(f"{where}: {exc}") from None
        raise ManifestError(f"{where}: not valid JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise ManifestError(f"{where}: not a shardkit manifest (missing \"format\": \"shardkit\")")
    check_version(raw.get("format_version"), where)
    shards_raw = raw.get("shards")
    if not isinstance(shards_raw, list):
        raise ManifestError(f"{where}: 'shards' must be a list")
    shards = tuple(ShardInfo.from_dict(s, f"{where}: shards[{i}]") for i, s in enumerate(shards_raw))
    names = [s.name for s in shards]
    if len(set(names)) != len(names):
        raise ManifestError(f"{where}: shard names repeat")
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ManifestError(f"{where}: 'metadata' must be an object")
    manifest = Manifest(
        shards=shards,
        schema=validate_schema(raw.get("schema"), where),
        metadata=metadata,
        created_by=str(raw.get("created_by", "")),
        fingerprint=str(raw.get("fingerprint", "")),
        order=manifest_order(raw.get("order"), where),
    )
    _check_totals(raw, manifest, where)
    return with_lengths(manifest, raw.get("lengths"), where)


def with_lengths(manifest: Manifest, raw: Any, where: str) -> Manifest:
    """``manifest`` with the length index entries ``raw`` (the JSON's ``lengths``), checked (M10)."""
    lengths = _lengths(raw, manifest, where)
    return manifest if not lengths else replace(manifest, lengths=lengths)


def _lengths(raw: Any, manifest: Manifest, where: str) -> tuple[LengthsInfo, ...]:
    """M10: absent, or a list of entries for distinct schema fields, in files no shard uses."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ManifestError(f"{where}: 'lengths' must be a list, got {type(raw).__name__}")
    n = manifest.num_samples
    entries = tuple(LengthsInfo.from_dict(e, n, f"{where}: lengths[{i}]") for i, e in enumerate(raw))
    fields, names = [e.field for e in entries], {e.name for e in entries}
    shard_names = getattr(manifest.shards, "names", None) or [s.name for s in manifest.shards]
    if len(set(fields)) != len(fields) or len(names) != len(entries) or names & set(shard_names):
        raise ManifestError(f"{where}: lengths entries repeat a field or a file name")
    unknown = [f for f in fields if f not in manifest.schema]
    if unknown:
        raise ManifestError(f"{where}: lengths of fields {unknown} that the schema does not list")
    return entries


def manifest_order(order: Any, where: str) -> dict[str, Any] | None:
    """M9: absent (older writers: order not recorded) or an object with a bool ``shuffled``."""
    if order is None:
        return None
    if not isinstance(order, dict) or not isinstance(order.get("shuffled"), bool):
        raise ManifestError(f"{where}: 'order' must be an object with a bool 'shuffled', got {order!r}")
    return order


def check_version(version: Any, where: str) -> None:
    try:
        major, minor = (int(x) for x in str(version).split("."))
    except ValueError:
        raise ManifestError(f"{where}: bad format_version {version!r}") from None
    if major != FORMAT_VERSION[0]:
        raise UnsupportedVersionError(
            f"{where}: format_version {major}.{minor}; this shardkit reads {FORMAT_VERSION[0]}.x"
        )


def _check_totals(raw: dict[str, Any], manifest: Manifest, where: str) -> None:
    expected = manifest.compute_fingerprint()
    if manifest.fingerprint != expected:
        raise ManifestError(f"{where}: fingerprint {manifest.fingerprint!r} does not match contents ({expected})")
    for key, value in (("num_samples", manifest.num_samples), ("num_bytes", manifest.num_bytes)):
        if raw.get(key) != value:
            raise ManifestError(f"{where}: {key} is {raw.get(key)!r}, shards add up to {value}")
