"""Samples ⇄ bytes: msgpack with extension types for numpy arrays, numpy scalars and tensors.

A sample is a ``dict[str, value]``; values are None, bool, int (64-bit), float, str, bytes,
list/tuple (decoded as list), dict with str keys, numpy scalars, numpy arrays of a numeric or
bool dtype (any shape) and CPU torch tensors. Nothing is ever pickled.

Extension payload (specs/shard-format.md §4), little-endian::

    u8  len(dtype)   dtype.str in ASCII, e.g. "<i4", "|b1", ">f8"
    u8  ndim         then ndim × u64 shape
    ... data         C-order bytes, ``prod(shape) * itemsize`` long

Arrays decode zero-copy with ``np.frombuffer`` over the extension payload (read-only views).
Tensors need torch at read time; it is imported only when a tensor field is met.
"""

from __future__ import annotations

import importlib
import struct
import sys
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np

from shardkit.errors import EncodeError, FormatError

EXT_NDARRAY = 1
EXT_TENSOR = 2
EXT_NPSCALAR = 3
_ARRAY_KINDS = frozenset("biufc")
_U8 = struct.Struct("<B")
_BASE_TYPES: tuple[type, ...] = (bool, int, float, str, bytes, dict)
_CONTAINERS = (dict, list, tuple)
_PLAIN = frozenset({type(None), bool, int, float, str, bytes})


def _encode_array(array: np.ndarray) -> bytes:
    if array.ndim > 255:
        raise TypeError(f"arrays have at most 255 dimensions, got {array.ndim}")
    if array.dtype.kind not in _ARRAY_KINDS:
        raise TypeError(f"numpy dtype {array.dtype} is not supported (numeric or bool only)")
    dtype = array.dtype.str.encode("ascii")
    head = _U8.pack(len(dtype)) + dtype + _U8.pack(array.ndim)
    head += struct.pack(f"<{array.ndim}Q", *array.shape)
    return head + np.ascontiguousarray(array).tobytes()


def _decode_array(payload: bytes) -> np.ndarray:
    try:
        dtype_len = payload[0]
        dtype = np.dtype(payload[1 : 1 + dtype_len].decode("ascii"))
        ndim = payload[1 + dtype_len]
        start = 2 + dtype_len
        shape = struct.unpack_from(f"<{ndim}Q", payload, start)
    except (IndexError, TypeError, ValueError, struct.error) as exc:
        raise FormatError(f"malformed array extension header: {exc}") from None
    if dtype.kind not in _ARRAY_KINDS:
        raise FormatError(f"array extension with unsupported dtype {dtype}")
    start += 8 * ndim
    count = 1
    for dim in shape:
        count *= dim
    if len(payload) - start != count * dtype.itemsize:
        raise FormatError(
            f"array extension: shape {shape} of {dtype} needs {count * dtype.itemsize} bytes, "
            f"payload has {len(payload) - start}"
        )
    return np.frombuffer(payload, dtype=dtype, count=count, offset=start).reshape(shape)


def _default(value: Any) -> Any:
    """Called by msgpack (``strict_types``) for every value that is not exactly a base type."""
    if isinstance(value, np.ndarray):
        return msgpack.ExtType(EXT_NDARRAY, _encode_array(value))
    if isinstance(value, np.generic):
        # Before the base-type subclasses: np.float64 is a float, np.str_ a str.
        return msgpack.ExtType(EXT_NPSCALAR, _encode_array(np.asarray(value)))
    if isinstance(value, (tuple, list)):
        return list(value)
    for base in _BASE_TYPES:  # IntEnum, str subclasses, OrderedDict …: stored as their base type
        if isinstance(value, base):
            return base(value)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.layout != torch.strided:
            raise TypeError(f"only dense CPU tensors are supported, got {value.device} {value.layout}")
        try:
            array = value.detach().contiguous().numpy()
        except RuntimeError as exc:  # conj/neg views and the like: not plain memory
            raise TypeError(f"tensor cannot be viewed as numpy: {exc}") from None
        return msgpack.ExtType(EXT_TENSOR, _encode_array(array))
    raise TypeError(f"unsupported type {type(value).__module__}.{type(value).__qualname__}")


def _ext_hook(code: int, payload: bytes) -> Any:
    if code == EXT_NDARRAY:
        return _decode_array(payload)
    if code == EXT_NPSCALAR:
        return _decode_array(payload)[()]
    if code == EXT_TENSOR:
        # torch is optional for the format; it is needed only when a tensor field is read.
        torch = importlib.import_module("torch")
        array = _decode_array(payload)
        return torch.from_numpy(array.copy() if not array.flags.writeable else array)
    raise FormatError(f"unknown msgpack extension type {code}")


class SampleEncoder:
    """Encodes samples to msgpack bytes. Not thread-safe (one per thread)."""

    def __init__(self) -> None:
        # strict_types: subclasses of base types (np.float64 is a float) reach ``_default``
        # instead of silently losing their type.
        self._packer = msgpack.Packer(default=_default, use_bin_type=True, autoreset=True, strict_types=True)

    def encode(self, sample: Any, sample_index: int | None = None) -> bytes:
        """msgpack bytes of one sample; ``EncodeError`` names the field path and sample index."""
        where = "sample" if sample_index is None else f"sample {sample_index}"
        if not isinstance(sample, dict):
            raise EncodeError(f"{where}: a sample must be a dict, got {type(sample).__name__}")
        bad_key = _find_bad_key(sample, "$")
        if bad_key:
            raise EncodeError(f"{where}: cannot encode field {bad_key}")
        try:
            return self._packer.pack(sample)
        except (TypeError, ValueError, OverflowError) as exc:
            path = find_unsupported(sample) or "$"
            raise EncodeError(f"{where}: cannot encode field {path}: {exc}") from None


def _find_bad_key(value: Any, path: str) -> str | None:
    """The first map key that is not a str (readers decode with ``strict_map_key``), or None.

    Walks only containers; a list of scalars costs one C-level ``set(map(type, …))``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}[{key!r}] (keys must be str)"
            if isinstance(item, _CONTAINERS):
                found = _find_bad_key(item, f"{path}.{key}")
                if found:
                    return found
    elif isinstance(value, (list, tuple)) and not _PLAIN.issuperset(map(type, value)):
        for i, item in enumerate(value):
            if isinstance(item, _CONTAINERS):
                found = _find_bad_key(item, f"{path}[{i}]")
                if found:
                    return found
    return None


def find_unsupported(value: Any, path: str = "$") -> str | None:
    """The JSON-path-like location of the first value the codec cannot encode (error path only)."""
    if type(value) is int:
        return None if -(2**63) <= value < 2**64 else path
    if type(value) in _PLAIN:
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}[{key!r}] (keys must be str)"
            found = find_unsupported(item, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = find_unsupported(item, f"{path}[{i}]")
            if found:
                return found
        return None
    try:
        converted = _default(value)
    except (TypeError, ValueError, OverflowError):
        return path
    return None if isinstance(converted, msgpack.ExtType) else find_unsupported(converted, path)


def decode_sample(data: bytes | memoryview) -> dict[str, Any]:
    """One sample from its msgpack bytes."""
    sample = msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=True)
    if not isinstance(sample, dict):
        raise FormatError(f"a sample must decode to a map, got {type(sample).__name__}")
    return sample


def iter_samples(block: bytes, expected: int) -> Iterator[dict[str, Any]]:
    """All samples of a decompressed block, in order; exactly ``expected`` of them."""
    unpacker = msgpack.Unpacker(
        ext_hook=_ext_hook, raw=False, strict_map_key=True, max_buffer_size=max(len(block), 1)
    )
    unpacker.feed(block)
    count = 0
    for sample in unpacker:
        if not isinstance(sample, dict):
            raise FormatError(f"sample {count} of block: expected a map, got {type(sample).__name__}")
        count += 1
        yield sample
    if count != expected:
        raise FormatError(f"block holds {count} samples, index says {expected}")


def decode_block_samples(block: bytes, expected: int) -> list[dict[str, Any]]:
    return list(iter_samples(block, expected))
