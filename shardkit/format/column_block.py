"""Column blocks (layout 1, specs/shard-format.md §3a): a block of uniform samples stored field by field.

A row block (layout 0) is its samples' msgpack maps back to back; reading it runs msgpack and
the array hook once per sample (~4.5 µs of a ~2.3 KB token sample, a third of a worker's time).
When every sample of a block has the same keys in the same order and every field is one of

* ``int`` (not bool), ``float``, ``bool`` — one little-endian array of ``n`` values;
* ``bytes``, ``str`` (UTF-8) — the values back to back plus ``n + 1`` u32 byte offsets;
* ``array`` — numpy arrays (ext type 1) of one dtype, ``ndim >= 1`` and one shape after axis 0:
  the rows back to back plus ``n + 1`` u32 row offsets,

the writer may store the block as columns instead, and does when that is not larger than the
rows. Integer columns are stored in the narrowest integer type that holds their values and
widened back on read (tokens of a < 65,536 vocabulary: 2 bytes instead of 4, which zstd could
not shrink anyway). Reading is then one pass per column and a slice per sample. The decoded
samples are the same values as the row block's (SV2): arrays are read-only views of their
column, so the arrays of one block share one buffer.

Raw column block::

    u32 LE  header length H
    H bytes msgpack header {"n": n, "columns": [{"name", "kind", "dtype", "as", "tail",
                                                 "data": [start, length], "offsets": start | None}]}
    segments at their ``start`` (8-byte aligned, from the start of the block)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import msgpack
import numpy as np

from shardkit.errors import FormatError
from shardkit.format.column_parse import HEAD, OFFSETS, offsets_from_lengths, parse_columns, to_samples
from shardkit.format.sample_codec import EXT_NDARRAY, decode_block_samples, parse_array

LAYOUT_ROWS = 0
LAYOUT_COLUMNS = 1
_SCALAR_DTYPES = {"float": np.dtype("<f8"), "bool": np.dtype("|b1")}
_NARROW = [np.dtype(name) for name in ("|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<i8", "<u8")]
# Above this average raw sample size rows stay rows: large samples are read as views of their
# row bytes (sample_views.py) and a column block would save nothing per sample.
MAX_AVERAGE_SAMPLE = 16 << 10


def _narrowest(low: int, high: int) -> np.dtype | None:
    for dtype in _NARROW:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    return None


class _Builder:
    """Segments of a column block under construction."""

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self.size = 0

    def add(self, data: bytes | memoryview) -> int:
        pad = -self.size % 8
        if pad:
            self.parts.append(b"\x00" * pad)
            self.size += pad
        start = self.size
        self.parts.append(data)
        self.size += len(data)
        return start


def _offsets(lengths: Sequence[int]) -> np.ndarray | None:
    offsets = offsets_from_lengths(lengths)
    return offsets.astype(OFFSETS) if offsets[-1] < 1 << 32 else None


def _column(name: str, values: list[Any], segments: _Builder) -> dict[str, Any] | None:
    """One column's header entry (its segments added to ``segments``), or None if ``values``
    cannot be a column."""
    kind = type(values[0])
    if any(type(v) is not kind for v in values):
        return None
    entry: dict[str, Any] = {"name": name, "tail": [], "offsets": None}
    if kind is int:
        low, high = min(values), max(values)
        dtype = _narrowest(low, high)
        if dtype is None:
            return None
        data = np.array(values, dtype=np.int64 if low < 0 or high < 1 << 63 else np.uint64).astype(dtype)
        entry.update(kind="int", dtype=dtype.str, **{"as": dtype.str})
    elif kind is float or kind is bool:
        dtype = _SCALAR_DTYPES[kind.__name__]
        data = np.array(values, dtype=dtype)
        entry.update(kind=kind.__name__, dtype=dtype.str, **{"as": dtype.str})
    elif kind is bytes or kind is str:
        pieces = values if kind is bytes else [v.encode("utf-8") for v in values]
        offsets = _offsets([len(p) for p in pieces])
        if offsets is None:
            return None
        entry.update(kind=kind.__name__, dtype="|u1", **{"as": "|u1"}, offsets=segments.add(offsets.tobytes()))
        entry["data"] = [segments.add(b"".join(pieces)), int(offsets[-1])]
        return entry
    elif kind is slice:  # an extension value (rows_to_columns)
        return _array_column(entry, values, segments)
    else:
        return None
    entry["data"] = [segments.add(data.tobytes()), data.nbytes]
    return entry


def _array_column(entry: dict[str, Any], values: list[slice], segments: _Builder) -> dict[str, Any] | None:
    """Arrays as their extension payloads (``slice(code, payload)``): one header is parsed, the
    others only compared with it, and the data parts are joined without a numpy array each."""
    first = values[0]
    if first.start != EXT_NDARRAY:
        return None
    head = parse_array(first.stop)
    if head.ndim == 0 or 0 in head.shape[1:]:
        return None
    name_end = 2 + first.stop[0]  # dtype length byte, dtype name, ndim byte
    prefix, shape = first.stop[:name_end], struct.Struct(f"<{head.ndim}Q")
    start, tail = name_end + shape.size, head.shape[1:]
    row_bytes = head.itemsize * int(np.prod(tail, dtype=np.int64))
    lengths, parts = [], []
    for value in values:
        payload = value.stop
        if value.start != EXT_NDARRAY or payload[:name_end] != prefix:
            return None
        rows, *rest = shape.unpack_from(payload, name_end)
        if tuple(rest) != tail or len(payload) - start != rows * row_bytes:
            return None
        lengths.append(rows)
        parts.append(memoryview(payload)[start:])
    offsets = _offsets(lengths)
    if offsets is None:
        return None
    flat = np.frombuffer(b"".join(parts), dtype=head.dtype)
    stored = flat
    if flat.dtype.kind in "iu" and flat.dtype.itemsize > 1 and flat.size:
        narrow = _narrowest(int(flat.min()), int(flat.max()))
        if narrow is not None and narrow.itemsize < flat.dtype.itemsize:
            stored = flat.astype(narrow)
    entry.update(kind="array", dtype=stored.dtype.str, tail=list(tail))
    entry["as"], entry["offsets"] = head.dtype.str, segments.add(offsets.tobytes())
    entry["data"] = [segments.add(stored.view(np.uint8).data), stored.nbytes]
    return entry


def rows_to_columns(rows: bytes, expected: int) -> bytes | None:
    """The column block of a row block (``expected`` msgpack samples back to back), or None
    when its samples are not uniform, large, or the columns would not be smaller."""
    if not expected or len(rows) // expected >= MAX_AVERAGE_SAMPLE:
        return None
    # ext_hook=slice: a C-level pair (code, payload) per extension value; msgpack's own ExtType
    # is built in Python, and decoding each array would cost a numpy array per sample.
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, ext_hook=slice, max_buffer_size=max(len(rows), 1))
    unpacker.feed(rows)
    samples = list(unpacker)
    if len(samples) != expected or type(samples[0]) is not dict:
        return None
    keys = list(samples[0])
    if any(type(s) is not dict or list(s) != keys for s in samples):
        return None
    segments = _Builder()
    columns = []
    for key in keys:
        column = _column(key, list(map(itemgetter(key), samples)), segments)
        if column is None:
            return None
        columns.append(column)
    if not columns:
        return None
    header = _header(expected, columns)
    base = -(-(HEAD.size + len(header) + 16 * len(columns)) // 8) * 8  # room for the shifted starts
    for column in columns:  # segment starts are relative to the block
        column["data"][0] += base
        if column["offsets"] is not None:
            column["offsets"] += base
    header = _header(expected, columns)
    block = b"".join([HEAD.pack(len(header)), header, b"\x00" * (base - HEAD.size - len(header)), *segments.parts])
    return block if len(block) <= len(rows) else None


def _header(n: int, columns: list[dict[str, Any]]) -> bytes:
    return msgpack.packb({"n": n, "columns": columns}, use_bin_type=True)


# ---- reading (columns.py) --------------------------------------------------------------------
def decode_columns(block: bytes | memoryview, expected: int, views: bool = False) -> list[dict[str, Any]]:
    """All ``expected`` samples of a column block, in order (``views``: bytes fields as
    ``memoryview`` slices of the block, as ``decode_block_samples`` gives large samples)."""
    return to_samples(parse_columns(block, expected), expected, views)


def decode_block(block: bytes | memoryview, expected: int, layout: int,
                 offsets: Sequence[int] | np.ndarray | None = None, views: bool = False) -> list[dict[str, Any]]:
    """The samples of a raw block of either layout (``decode_block_samples`` for rows)."""
    if layout == LAYOUT_COLUMNS:
        return decode_columns(block, expected, views)
    if layout != LAYOUT_ROWS:
        raise FormatError(f"unknown block layout {layout}")
    return decode_block_samples(block, expected, offsets, views)
