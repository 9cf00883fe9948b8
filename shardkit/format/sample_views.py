"""Decoding a large sample without copying its big values out of the block.

``msgpack.unpackb`` copies every ``bin`` value into a new ``bytes`` and every extension payload
into a new ``bytes`` before the array hook sees it: for a 85 KB image that is a full extra pass
over the data (measured ~9 µs of ~75 µs per sample at W=0). ``unpack_with_views`` walks the
top-level map of one encoded sample itself and returns ``bin`` values as ``memoryview`` slices
of the block and arrays as read-only numpy views of it. The block (e.g. a memory-mapped,
checksum-verified shard file) stays alive as long as any of those views does.

It handles what large samples are made of — a map with str keys whose values are bin, ext
(arrays, tensors, numpy scalars), ints, floats, bools and nil — and returns ``None`` for
anything else (str values, nested lists and maps, truncated or malformed bytes), so that the
caller decodes that sample with ``unpackb``, which also produces the proper error.

Only for consumers that copy the values out right away (the loader's default collation):
a ``memoryview`` is not ``bytes`` to user code.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

ExtHook = Callable[[int, memoryview], Any]

_BIN_LENGTH = {0xC4: 1, 0xC5: 2, 0xC6: 4}
_EXT_LENGTH = {0xC7: 1, 0xC8: 2, 0xC9: 4}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_SCALARS = {  # msgpack type byte → (struct of the value that follows)
    0xCA: struct.Struct(">f"), 0xCB: struct.Struct(">d"),
    0xCC: struct.Struct(">B"), 0xCD: struct.Struct(">H"), 0xCE: struct.Struct(">I"), 0xCF: struct.Struct(">Q"),
    0xD0: struct.Struct(">b"), 0xD1: struct.Struct(">h"), 0xD2: struct.Struct(">i"), 0xD3: struct.Struct(">q"),
}
_CONSTANTS = {0xC0: None, 0xC2: False, 0xC3: True}
_keys: dict[bytes, str] = {}


def _length(buf: memoryview, pos: int, size: int) -> int:
    return int.from_bytes(buf[pos : pos + size], "big")


def unpack_with_views(buf: memoryview, ext_hook: ExtHook) -> dict[str, Any] | None:
    """The sample encoded in ``buf`` (exactly one msgpack map), big values as views (extension
    payloads go to ``ext_hook(code, view)``); None when the sample holds something this walker
    leaves to ``unpackb``."""
    try:
        return _walk(buf, ext_hook)
    except (IndexError, ValueError, UnicodeDecodeError, struct.error):
        return None


def _walk(buf: memoryview, ext_hook: ExtHook) -> dict[str, Any] | None:
    end = len(buf)
    head = buf[0]
    if 0x80 <= head <= 0x8F:
        count, pos = head & 0x0F, 1
    elif head == 0xDE:
        count, pos = _length(buf, 1, 2), 3
    elif head == 0xDF:
        count, pos = _length(buf, 1, 4), 5
    else:
        return None
    sample: dict[str, Any] = {}
    for _ in range(count):
        kind = buf[pos]
        if 0xA0 <= kind <= 0xBF:
            size, pos = kind & 0x1F, pos + 1
        elif kind == 0xD9:
            size, pos = buf[pos + 1], pos + 2
        else:
            return None
        raw_key = bytes(buf[pos : pos + size])
        key = _keys.get(raw_key)
        if key is None:
            key = raw_key.decode("utf-8")
            if len(_keys) < 4096:
                _keys[raw_key] = key
        pos += size
        kind = buf[pos]
        value: Any
        if kind <= 0x7F:
            value, pos = kind, pos + 1
        elif kind >= 0xE0:
            value, pos = kind - 0x100, pos + 1
        elif kind in _BIN_LENGTH:
            width = _BIN_LENGTH[kind]
            size, pos = _length(buf, pos + 1, width), pos + 1 + width
            if pos + size > end:
                return None
            value, pos = buf[pos : pos + size], pos + size
        elif kind in _EXT_LENGTH or kind in _FIXEXT:
            if kind in _FIXEXT:
                size, pos = _FIXEXT[kind], pos + 1
            else:
                width = _EXT_LENGTH[kind]
                size, pos = _length(buf, pos + 1, width), pos + 1 + width
            code = int.from_bytes(buf[pos : pos + 1], "big", signed=True)
            pos += 1
            if pos + size > end:
                return None
            value, pos = ext_hook(code, buf[pos : pos + size]), pos + size
        elif kind in _SCALARS:
            scalar = _SCALARS[kind]
            (value,) = scalar.unpack_from(buf, pos + 1)
            pos += 1 + scalar.size
        elif kind in _CONSTANTS:
            value, pos = _CONSTANTS[kind], pos + 1
        else:
            return None
        sample[key] = value
    return sample if pos == end else None


def owned(value: Any) -> Any:
    """``value`` as ``decode_sample`` gives it, for a value that leaves the collation as is: a
    bin value viewed in its block becomes ``bytes``, and an array viewing the block becomes a
    (read-only) copy, so that it neither escapes as a view nor keeps the whole block alive."""
    kind = type(value)
    if kind is memoryview:
        return bytes(value)
    if kind is np.ndarray and isinstance(value.base, memoryview):
        copy = value.copy()
        copy.flags.writeable = False  # read-only, as decoded arrays are
        return copy
    return value
