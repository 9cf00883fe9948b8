"""The per-sample length index (specs/manifest.md §6, M10-M13): one uint32 per sample, the
first-dimension length of an integer array field, written at pack time so that token-block
plans (specs/token-blocks.md TB6) need no scan of the shards.

An index file holds the lengths of one field of every sample in manifest order, as
little-endian uint32 back to back, nothing else; the manifest's ``lengths`` entry names it with
its size and xxh64. ``block_lengths`` finds them in an arranged raw block (either layout): a
column block's from the field's row offsets, a row block's from its samples walked by msgpack
with array extensions read as their shape only.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from shardkit.errors import CorruptShardError, FormatError, ManifestError
from shardkit.format.checksum import check_checksum_text, xxh64_text
from shardkit.format.column_block import LAYOUT_COLUMNS, LAYOUT_ROWS
from shardkit.format.column_parse import array_lengths
from shardkit.format.sample_codec import EXT_NDARRAY, parse_head

LENGTHS_DTYPE = np.dtype("<u4")
LENGTHS_FILE = re.compile(r"lengths-[0-9]{3,}\.u32")  # base names, in the shards' folder


def lengths_file_name(index: int) -> str:
    return f"lengths-{index:03d}.u32"


def is_document(value: Any) -> bool:
    """An integer numpy array of at least one dimension: what a length is recorded for."""
    return isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim >= 1


def block_lengths(raw: bytes | memoryview, offsets: np.ndarray, layout: int) -> dict[str, np.ndarray]:
    """For every field that is an integer array in every sample of the arranged block ``raw``,
    the first-dimension length in each sample (int64), in field order of the first sample."""
    n = len(offsets) - 1
    if layout == LAYOUT_COLUMNS:
        return array_lengths(raw, n)
    if layout != LAYOUT_ROWS:
        raise FormatError(f"unknown block layout {layout}")
    samples = _row_heads(raw, n)
    if not samples:
        return {}
    found: dict[str, np.ndarray] = {}
    for name in samples[0]:
        values: list[Any] = [s.get(name) for s in samples]
        if all(type(v) is _Length for v in values):
            found[name] = np.array(values, dtype=np.int64)
    return found


class _Length(int):
    """The first dimension of an integer array met while walking a row block (not an int value)."""


def _head_hook(code: int, payload: bytes) -> Any:
    """Array extensions as their first dimension when they are integer arrays; nothing else is
    built (no array, no tensor)."""
    if code != EXT_NDARRAY:
        return None
    dtype, ndim, shape, start = parse_head(payload)
    if dtype.kind not in "iu" or ndim < 1:
        return None
    try:
        return _Length(shape.unpack_from(payload, start)[0])
    except struct.error as exc:
        raise FormatError(f"malformed array extension header: {exc}") from None


def _row_heads(raw: bytes | memoryview, n: int) -> list[dict[str, Any]]:
    """The samples of a row block with arrays replaced by ``_Length`` (msgpack's C loop)."""
    unpacker = msgpack.Unpacker(ext_hook=_head_hook, raw=False, strict_map_key=True, max_buffer_size=max(len(raw), 1))
    unpacker.feed(raw)
    try:
        samples = [s if isinstance(s, dict) else {} for s in unpacker]
    except (ValueError, msgpack.UnpackException) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"row block does not decode: {type(exc).__name__}: {exc}") from None
    if len(samples) != n:
        raise FormatError(f"row block holds {len(samples)} samples, index says {n}")
    return samples


@dataclass(frozen=True)
class LengthsInfo:
    """A manifest ``lengths`` entry (M10): the index of ``field`` in file ``name``."""

    field: str
    name: str
    num_bytes: int
    checksum: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "name": self.name,
            "dtype": LENGTHS_DTYPE.str,
            "num_bytes": self.num_bytes,
            "checksum": self.checksum,
        }

    @classmethod
    def from_dict(cls, raw: Any, num_samples: int, where: str) -> LengthsInfo:
        if not isinstance(raw, dict) or not isinstance(raw.get("field"), str) or not isinstance(raw.get("name"), str):
            raise ManifestError(f"{where}: a lengths entry must be an object with str 'field' and 'name', got {raw!r}")
        if raw.get("dtype") != LENGTHS_DTYPE.str:
            raise ManifestError(f"{where}: lengths dtype must be {LENGTHS_DTYPE.str!r}, got {raw.get('dtype')!r}")
        base = raw["name"].rsplit("/", 1)[-1]
        if not LENGTHS_FILE.fullmatch(base) or raw["name"].count("/") > 1 or ".." in raw["name"]:
            raise ManifestError(f"{where}: unsafe lengths file name {raw['name']!r} (M10)")
        expected = num_samples * LENGTHS_DTYPE.itemsize
        if raw.get("num_bytes") != expected:
            raise ManifestError(
                f"{where}: lengths file is {raw.get('num_bytes')!r} bytes, {num_samples} samples need {expected}"
            )
        try:
            checksum = check_checksum_text(raw.get("checksum"), where)
        except FormatError as exc:
            raise ManifestError(str(exc)) from None
        return cls(raw["field"], raw["name"], expected, checksum)


def encode_lengths(lengths: np.ndarray) -> bytes:
    """The bytes of an index file (the caller checked every length is below 2**32)."""
    return lengths.astype(LENGTHS_DTYPE).tobytes()


def decode_lengths(data: bytes | memoryview, info: LengthsInfo, where: str) -> np.ndarray:
    """M11: the lengths in an index file, after its size and checksum are checked."""
    if len(data) != info.num_bytes:
        raise CorruptShardError(
            f"{where}: length index of {info.field!r} is {len(data)} bytes, manifest says {info.num_bytes} (truncated?)"
        )
    found = xxh64_text(data)
    if found != info.checksum:
        raise CorruptShardError(
            f"{where}: length index of {info.field!r}: checksum {found}, manifest says {info.checksum}"
        )
    return np.frombuffer(data, dtype=LENGTHS_DTYPE).astype(np.uint32)
