"""One MDS column value: encoding name + bytes → a value shardkit stores with its type intact.

Byte layouts (little-endian), as observed in ``streaming.MDSWriter`` output:

* ``int``: i8; ``uint8`` … ``float64``: that fixed-width type; ``str_int``/``str_float``/
  ``str_decimal``: decimal text (``str_decimal`` stays text: Decimal is not a shardkit type)
* ``ndarray[:dtype[:d0,d1,…]]``: [u8 dtype code if no dtype given]
  [u8 ndim<<2 | shape width code, shape as u8/u16/u32/u64 × ndim, if no shape given] [values]
* ``pil``: u32 width, u32 height, u32 len(mode), mode, raw pixels
* ``list[jpeg|png|pil]``: u32 reserved, u32 n, u32 sizes × n, items; ``jpeg_array``: u32 n, u32 sizes × n, items
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from shardkit.errors import SourceError
from shardkit.format.limits import MAX_NESTING_DEPTH
from shardkit.write.imports import peer_files

_SCALARS = {
    name: np.dtype(name).newbyteorder("<")
    for name in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
    + ("float16", "float32", "float64")
}
_ARRAY_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32", 33: "int32",
                 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}  # fmt: skip
_SHAPE_DTYPES = ("<u1", "<u2", "<u4", "<u8")
_PIL_CHANNELS = {"L": 1, "P": 1, "RGB": 3, "RGBA": 4, "CMYK": 4, "YCbCr": 3, "LA": 2}


def check_encoding(encoding: Any, origin: str) -> None:
    """Raise ``SourceError`` for encodings this reader does not take (before any sample is read)."""
    if not isinstance(encoding, str):
        raise SourceError(f"{origin}: encoding must be a string, got {encoding!r}")
    if encoding == "pkl":
        raise SourceError(f"{origin}: pickled ('pkl') columns are not read (shardkit never unpickles)")
    if encoding.split(":", 1)[0] not in _SIMPLE and encoding not in _LISTS and encoding.split(":")[0] != "ndarray":
        raise SourceError(f"{origin}: unknown MDS encoding {encoding!r}")


def decode(encoding: str, data: bytes, origin: str) -> Any:
    """The value of one column; ``SourceError`` naming ``origin`` when the bytes do not fit."""
    try:
        if encoding.startswith("ndarray"):
            return _ndarray(encoding, data, origin)
        if encoding in _LISTS:
            return _LISTS[encoding](data, origin)
        return _SIMPLE[encoding](data, origin)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise SourceError(f"{origin}: bad {encoding} value: {exc}") from None


def _scalar(name: str) -> Callable[[bytes, str], Any]:
    dtype = _SCALARS[name]

    def read(data: bytes, origin: str) -> Any:
        if len(data) != dtype.itemsize:
            raise SourceError(f"{origin}: {name} needs {dtype.itemsize} bytes, got {len(data)}")
        return np.frombuffer(data, dtype)[0]

    return read


def _int(data: bytes, origin: str) -> int:
    if len(data) != 8:
        raise SourceError(f"{origin}: int needs 8 bytes, got {len(data)}")
    return int.from_bytes(data, "little", signed=True)


def _ndarray(encoding: str, data: bytes, origin: str) -> np.ndarray:
    parts = encoding.split(":")
    at = 0
    if len(parts) > 1 and parts[1]:
        dtype_name = parts[1]
    else:
        dtype_name = _ARRAY_DTYPES.get(data[0] if data else -1, "")
        at = 1
    if dtype_name not in _SCALARS:
        raise SourceError(f"{origin}: unknown ndarray dtype in {encoding!r} (code {data[:1].hex()})")
    if len(parts) > 2:
        shape = [int(d) for d in parts[2].split(",")]
    else:
        if at >= len(data):
            raise SourceError(f"{origin}: {len(data)} bytes end before the ndarray's shape header")
        ndim, width = data[at] >> 2, _SHAPE_DTYPES[data[at] & 3]
        size = np.dtype(width).itemsize * ndim
        if at + 1 + size > len(data):
            raise SourceError(f"{origin}: {len(data)} bytes end inside the ndarray's {ndim}-d shape")
        shape = np.frombuffer(data, width, ndim, at + 1).tolist()
        at += 1 + size
    if any(d < 0 for d in shape):
        raise SourceError(f"{origin}: ndarray shape {shape} has a negative dimension")
    dtype = _SCALARS[dtype_name]
    if len(data) - at != dtype.itemsize * math.prod(shape):
        raise SourceError(f"{origin}: {len(data) - at} value bytes do not make a {dtype_name} array of shape {shape}")
    return np.frombuffer(data, dtype, offset=at).reshape(shape).copy()


def _pil(data: bytes, origin: str) -> np.ndarray:
    width, height, mode_size = np.frombuffer(data, "<u4", 3).tolist()
    mode = data[12 : 12 + mode_size].decode()
    channels = _PIL_CHANNELS.get(mode)
    raw = data[12 + mode_size :]
    if channels is None or len(raw) != width * height * channels:
        raise SourceError(f"{origin}: PIL mode {mode!r} {width}x{height} is not read (modes {sorted(_PIL_CHANNELS)})")
    array = np.frombuffer(raw, np.uint8).reshape(height, width, channels).copy()
    return array[:, :, 0] if channels == 1 else array


def _items(data: bytes, at: int, origin: str) -> list[bytes]:
    count = int.from_bytes(data[at : at + 4], "little")
    sizes = np.frombuffer(data, "<u4", count, at + 4).tolist()
    at += 4 + 4 * count
    out = []
    for size in sizes:
        out.append(data[at : at + size])
        at += size
    if at != len(data):
        raise SourceError(f"{origin}: list items do not add up to {len(data)} bytes")
    return out


_SIMPLE: dict[str, Callable[[bytes, str], Any]] = {
    "bytes": lambda data, origin: data,
    "str": lambda data, origin: data.decode("utf-8"),
    "int": _int,
    "str_int": lambda data, origin: int(data.decode()),
    "str_float": lambda data, origin: float(data.decode()),
    "str_decimal": lambda data, origin: data.decode(),
    "json": lambda data, origin: peer_files.loads(data, origin, MAX_NESTING_DEPTH - 1),  # a field: level 2
    "jpeg": lambda data, origin: data,
    "png": lambda data, origin: data,
    "pil": _pil,
    **{name: _scalar(name) for name in _SCALARS},
}
_LISTS: dict[str, Callable[[bytes, str], Any]] = {
    "list[jpeg]": lambda data, origin: _items(data, 4, origin),
    "list[png]": lambda data, origin: _items(data, 4, origin),
    "list[pil]": lambda data, origin: [_pil(item, origin) for item in _items(data, 4, origin)],
    "jpeg_array": lambda data, origin: _items(data, 0, origin),
    "jpegarray": lambda data, origin: _items(data, 0, origin),
}
