"""One LitData leaf: ``data_format`` name + bytes → a value shardkit stores with its type intact.

Byte layouts, as observed in ``litdata`` 0.2.x output (little-endian unless noted):

* ``int`` i8, ``float`` f8, ``bool`` u8, ``str``/``text`` UTF-8, ``bytes`` as is
* ``numpy``: u32 dtype code, u32 ndim, u32 shape × ndim, values; ``no_header_numpy:<code>``: 1-D values
* ``tensor``: *big-endian* u32 dtype code, u32 ndim, u32 shape × ndim, then values;
  ``no_header_tensor:<code>``: 1-D values (tensors come back as numpy arrays of the same dtype)
* ``json``: a tagged binary tree (tag byte 0..11, see ``_nested``) or, from older writers, JSON text
* ``jpeg``/``image:*``/``video:*``/``audio:*``/``file*``/``pdf``/…: the file's encoded bytes
* ``pil``: u32 width, u32 height, u32 len(mode), mode, raw pixels; ``jpeg_array``: u32 n, u32 sizes × n, items
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from shardkit.errors import SourceError
from shardkit.format.limits import MAX_NESTING_DEPTH
from shardkit.write.imports import mds_values, peer_files

# Index → dtype, in the writers' fixed order ("object", "bytes", "str", "void" are not arrays we take).
_NUMPY_CODES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                "float32", "float64", "complex64", "complex128", "bool"]  # fmt: skip
_TORCH_CODES = ["float32", "float32", "float64", "float64", "complex64", "complex64", "complex128", "complex128",
                "float16", "float16", "bfloat16", "uint8", "int8", "int16", "int16", "int32", "int32", "int64",
                "int64", "bool", "uint16"]  # fmt: skip
_BYTES_KINDS = ("jpeg", "image", "video", "audio", "file", "pdf", "mesh", "nifti", "tifffile")
_U32 = struct.Struct("<I")
_RECORD_TAGS = {0x10: 11, 0x11: 7, 0x12: 8, 0x13: 9, 0x14: 10}  # record cell tag → scalar tag
_MIN_ITEM_BYTES = {1: 4, 2: 8, 3: 8, 5: 5, 6: 0}  # tag → the fewest bytes one item takes (others: 1)


def check_format(name: Any, origin: str) -> None:
    """Raise ``SourceError`` for leaf formats this reader does not take (before any item is read)."""
    if not isinstance(name, str):
        raise SourceError(f"{origin}: data_format entries must be strings, got {name!r}")
    kind = name.split(":", 1)[0]
    if kind == "pickle":
        raise SourceError(f"{origin}: pickled leaves are not read (shardkit never unpickles)")
    if kind not in _DECODERS and kind not in _BYTES_KINDS:
        raise SourceError(f"{origin}: unknown LitData data_format {name!r}")


def decode(name: str, data: bytes, origin: str) -> Any:
    kind, _, arg = name.partition(":")
    try:
        if kind in _BYTES_KINDS:
            return data
        return _DECODERS[kind](data, arg, origin)
    except SourceError:
        raise
    except (ValueError, IndexError, UnicodeDecodeError, struct.error) as exc:
        raise SourceError(f"{origin}: bad {name} value: {exc}") from None


def _dtype(codes: list[str], code: int, origin: str) -> np.dtype:
    if not 0 <= code < len(codes) or codes[code] == "bfloat16":
        raise SourceError(f"{origin}: dtype code {code} is not read (bfloat16 and object arrays have no numpy form)")
    return np.dtype(codes[code]).newbyteorder("<") if codes[code] != "bool" else np.dtype(bool)


def _array(data: bytes, arg: str, origin: str, codes: list[str], order: str) -> np.ndarray:
    if arg:  # no header: a 1-D array of the dtype named in the format
        return np.frombuffer(data, _dtype(codes, int(arg), origin)).copy()
    code, ndim = struct.unpack_from(f"{order}II", data, 0)
    shape = struct.unpack_from(f"{order}{ndim}I", data, 8)
    dtype = _dtype(codes, code, origin)
    start = 8 + 4 * ndim
    if len(data) - start != dtype.itemsize * math.prod(shape):
        raise SourceError(f"{origin}: {len(data) - start} value bytes do not make a {dtype} array of shape {shape}")
    return np.frombuffer(data, dtype, offset=start).reshape(shape).copy()


def _nested(raw: bytes, at: int, depth: int, origin: str) -> tuple[Any, int]:
    """One value of the tagged tree at ``at`` → (value, next offset). ``depth``: the levels
    of lists and dicts still allowed (S3); every count is checked against the bytes left
    before anything is made of that size."""
    tag = raw[at]
    if tag in (7, 8, 9, 10, 11):  # scalars: str, i64, f64, bool, None
        return _nested_scalar(tag, raw, at + 1)
    if depth <= 0:
        raise SourceError(f"{origin}: json value nested deeper than {MAX_NESTING_DEPTH - 1} levels")
    count = _U32.unpack_from(raw, at + 1)[0]
    at += 5
    left = len(raw) - at
    if count * _MIN_ITEM_BYTES.get(tag, 1) > left:  # each item takes at least that many bytes
        raise ValueError(f"tag {tag} declares {count} items, only {left} bytes are left at byte {at}")
    if tag == 0:  # JSON text
        return peer_files.loads(raw[at : at + count], origin, depth), at + count
    if tag == 1:  # list of str
        out = []
        for _ in range(count):
            text, at = _utf8(raw, at)
            out.append(text)
        return out, at
    if tag in (2, 3):  # list of i64 / f64
        values = np.frombuffer(raw, "<i8" if tag == 2 else "<f8", count, at).tolist()
        return values, at + 8 * count
    if tag == 4:  # list of bool
        return [bool(b) for b in raw[at : at + count]], at + count
    if tag == 5:  # dict: count × (key, value)
        mapping = {}
        for _ in range(count):
            key, at = _utf8(raw, at)
            mapping[key], at = _nested(raw, at, depth - 1, origin)
        return mapping, at
    if tag == 6:  # records: count rows, then u32 n_keys, keys, then per row per key a tagged scalar
        return _records(raw, at, count)
    raise ValueError(f"unknown tag {tag} at byte {at - 5}")


def _nested_scalar(tag: int, raw: bytes, at: int) -> tuple[Any, int]:
    if tag == 7:
        return _utf8(raw, at)
    if tag == 8:
        return struct.unpack_from("<q", raw, at)[0], at + 8
    if tag == 9:
        return struct.unpack_from("<d", raw, at)[0], at + 8
    if tag == 10:
        return bool(raw[at]), at + 1
    return None, at


def _records(raw: bytes, at: int, rows: int) -> tuple[list[dict[str, Any]], int]:
    num_keys = _U32.unpack_from(raw, at)[0]
    at += 4
    if 4 * num_keys + rows * max(num_keys, 1) > len(raw) - at:  # a key takes 4 bytes, a cell 1 or more
        raise ValueError(f"{rows} records of {num_keys} keys do not fit the {len(raw) - at} bytes left at byte {at}")
    keys = []
    for _ in range(num_keys):
        key, at = _utf8(raw, at)
        keys.append(key)
    out = []
    for _ in range(rows):
        row = {}
        for key in keys:
            tag = _RECORD_TAGS.get(raw[at])
            if tag is None:
                raise ValueError(f"unknown record tag {raw[at]} at byte {at}")
            row[key], at = _nested_scalar(tag, raw, at + 1)
        out.append(row)
    return out, at


def _utf8(raw: bytes, at: int) -> tuple[str, int]:
    size = _U32.unpack_from(raw, at)[0]
    if at + 4 + size > len(raw):
        raise ValueError(f"a {size}-byte string at byte {at} runs past the end ({len(raw)} bytes)")
    return raw[at + 4 : at + 4 + size].decode("utf-8"), at + 4 + size


def _json(data: bytes, arg: str, origin: str) -> Any:
    if not data or data[0] > 0x20:  # older writers: plain JSON text
        return peer_files.loads(data, origin, MAX_NESTING_DEPTH - 1)
    value, end = _nested(data, 0, MAX_NESTING_DEPTH - 1, origin)  # a field of the sample: level 2
    if end != len(data):
        raise SourceError(f"{origin}: {len(data) - end} bytes left after the value")
    return value


def _fixed(fmt: str) -> Callable[[bytes, str, str], Any]:
    return lambda data, arg, origin: struct.unpack(fmt, data)[0]


_DECODERS: dict[str, Callable[[bytes, str, str], Any]] = {
    "int": _fixed("<q"),
    "float": _fixed("<d"),
    "bool": lambda data, arg, origin: struct.unpack("<?", data)[0],
    "str": lambda data, arg, origin: data.decode("utf-8"),
    "text": lambda data, arg, origin: data.decode("utf-8"),
    "bytes": lambda data, arg, origin: data,
    "numpy": lambda data, arg, origin: _array(data, "", origin, _NUMPY_CODES, "<"),
    "no_header_numpy": lambda data, arg, origin: _array(data, arg, origin, _NUMPY_CODES, "<"),
    "tensor": lambda data, arg, origin: _array(data, "", origin, _TORCH_CODES, ">"),
    "no_header_tensor": lambda data, arg, origin: _array(data, arg, origin, _TORCH_CODES, ">"),
    "json": _json,
    "pil": lambda data, arg, origin: mds_values.decode("pil", data, origin),
    "jpeg_array": lambda data, arg, origin: mds_values.decode("jpeg_array", data, origin),
}
