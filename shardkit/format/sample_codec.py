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
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any

import msgpack
import numpy as np

from shardkit.errors import EncodeError, FormatError
from shardkit.format.limits import MAX_NESTING_DEPTH
from shardkit.format.sample_views import unpack_with_views
from shardkit.format.sample_walk import find_bad_key, nesting_problem, too_deep
from shardkit.format.tensor_dtypes import (
    TORCH_ONLY_DTYPES,
    decode_torch_only,
    encode_torch_only,
    torch_only_name,
)

EXT_NDARRAY = 1
EXT_TENSOR = 2
EXT_NPSCALAR = 3
_ARRAY_KINDS = frozenset("biufc")
_U8 = struct.Struct("<B")
_BASE_TYPES: tuple[type, ...] = (bool, int, float, str, bytes, dict)
_PLAIN = frozenset({type(None), bool, int, float, str, bytes})
_DECODED_CONTAINERS = frozenset({dict, list})


_HEADS: dict[tuple[str, int], tuple[bytes, struct.Struct]] = {}


def _array_head(dtype: np.dtype, ndim: int) -> tuple[bytes, struct.Struct]:
    """The constant part of an array header and the packer of its shape (memoized)."""
    key = (dtype.str, ndim)
    found = _HEADS.get(key)
    if found is None:
        if ndim > 255:
            raise TypeError(f"arrays have at most 255 dimensions, got {ndim}")
        if dtype.kind not in _ARRAY_KINDS:
            raise TypeError(f"numpy dtype {dtype} is not supported (numeric or bool only)")
        name = dtype.str.encode("ascii")
        found = _HEADS[key] = (_U8.pack(len(name)) + name + _U8.pack(ndim), struct.Struct(f"<{ndim}Q"))
    return found


def _encode_array(array: np.ndarray) -> bytes:
    prefix, shape = _array_head(array.dtype, array.ndim)
    data = array.data if array.flags.c_contiguous else np.ascontiguousarray(array).data
    return b"".join((prefix, shape.pack(*array.shape), data))


# Parsed array headers by their leading bytes (dtype length, dtype name, ndim): the hot path
# decodes millions of arrays with a handful of distinct headers.
_PARSED: dict[bytes, tuple[np.dtype, int, struct.Struct, int]] = {}


def parse_head(payload: bytes | memoryview) -> tuple[np.dtype, int, struct.Struct, int]:
    try:
        dtype_len = payload[0]
        key = bytes(payload[: 2 + dtype_len])  # no copy for bytes; a view (sample_views.py) needs one
        found = _PARSED.get(key)
        if found is not None:
            return found
        dtype = np.dtype(key[1 : 1 + dtype_len].decode("ascii"))
        ndim = key[1 + dtype_len]
    except (IndexError, TypeError, ValueError, SyntaxError, UnicodeDecodeError) as exc:  # np.dtype("01"): SyntaxError
        raise FormatError(f"malformed array extension header: {exc}") from None
    if dtype.kind not in _ARRAY_KINDS:
        raise FormatError(f"array extension with unsupported dtype {dtype}")
    found = (dtype, ndim, struct.Struct(f"<{ndim}Q"), 2 + dtype_len)
    if len(_PARSED) < 1024:
        _PARSED[key] = found
    return found


def parse_array(payload: bytes | memoryview) -> np.ndarray:
    """The array of an extension payload: a read-only view of ``payload``."""
    dtype, ndim, shape_struct, start = parse_head(payload)
    try:
        shape = shape_struct.unpack_from(payload, start)
    except struct.error as exc:
        raise FormatError(f"malformed array extension header: {exc}") from None
    start += shape_struct.size
    count = 1
    for dim in shape:
        count *= dim
    if len(payload) - start != count * dtype.itemsize:
        raise FormatError(
            f"array extension: shape {shape} of {dtype} needs {count * dtype.itemsize} bytes, "
            f"payload has {len(payload) - start}"
        )
    return np.ndarray(shape, dtype, payload, start)  # a read-only view; cheaper than frombuffer


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
    torch = sys.modules.get("torch")  # never imported here: a tensor means torch is loaded
    if torch is not None and isinstance(value, torch.Tensor):
        return msgpack.ExtType(EXT_TENSOR, _encode_tensor(value, torch))
    raise TypeError(f"unsupported type {type(value).__module__}.{type(value).__qualname__}")


def _encode_tensor(value: Any, torch: Any) -> bytes:
    """The array payload of a dense CPU tensor; torch-only dtypes (SV4) under torch's name."""
    if value.device.type != "cpu" or value.layout != torch.strided:
        raise TypeError(f"only dense CPU tensors are supported, got {value.device} {value.layout}")
    try:
        tensor = value.detach().resolve_conj().resolve_neg().contiguous()
        if str(value.dtype).removeprefix("torch.") in TORCH_ONLY_DTYPES:
            return encode_torch_only(tensor, torch)
        return _encode_array(tensor.numpy())
    except RuntimeError as exc:  # not plain memory
        raise TypeError(f"tensor cannot be viewed as numpy: {exc}") from None


def _ext_hook(code: int, payload: bytes | memoryview) -> Any:
    if code == EXT_NDARRAY:
        return parse_array(payload)
    if code == EXT_NPSCALAR:
        return parse_array(payload)[()]
    if code == EXT_TENSOR:
        name = torch_only_name(payload)
        if name is not None:
            return decode_torch_only(payload, name)
        # torch is optional for the format; it is needed only when a tensor field is read.
        torch = importlib.import_module("torch")
        array = parse_array(payload)
        return torch.from_numpy(array.copy() if not array.flags.writeable else array)
    raise FormatError(f"unknown msgpack extension type {code}")


class SampleEncoder:
    """Encodes samples to msgpack bytes. Not thread-safe (one per thread)."""

    def __init__(self) -> None:
        # strict_types: subclasses of base types (np.float64 is a float) reach ``_default``
        # instead of silently losing their type.
        self._packer = msgpack.Packer(default=_default, use_bin_type=True, autoreset=True, strict_types=True)

    def encode(self, sample: Any, sample_index: int | None = None, check_keys: bool = True) -> bytes:
        """msgpack bytes of one sample; ``EncodeError`` names the field path and sample index.

        ``check_keys=False`` skips the check for non-str map keys, for sources whose keys are
        str by construction (JSON objects, Parquet columns and struct fields); nesting deeper
        than ``MAX_NESTING_DEPTH`` is refused either way (SV3)."""
        where = "sample" if sample_index is None else f"sample {sample_index}"
        if not isinstance(sample, dict):
            raise EncodeError(f"{where}: a sample must be a dict, got {type(sample).__name__}")
        bad_key = find_bad_key(sample, "$") if check_keys or too_deep(sample, 1) else None
        if bad_key:
            raise EncodeError(f"{where}: cannot encode field {bad_key}")
        try:
            return self._packer.pack(sample)
        except (TypeError, ValueError, OverflowError) as exc:
            path = find_unsupported(sample) or "$"
            raise EncodeError(f"{where}: cannot encode field {path}: {exc}") from None


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


_STACK_MESSAGE = f"nested deeper than msgpack's 1024 levels (the format allows {MAX_NESTING_DEPTH}, SV3)"


def _unpack(data: bytes | memoryview) -> Any:
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=True)
    except msgpack.StackError:  # its message is empty
        raise FormatError(f"sample is {_STACK_MESSAGE}") from None


def decode_sample(data: bytes | memoryview) -> dict[str, Any]:
    """One sample from its msgpack bytes: a map, nested at most ``MAX_NESTING_DEPTH`` deep (SV3)."""
    sample = _unpack(data)
    if not isinstance(sample, dict):
        raise FormatError(f"a sample must decode to a map, got {type(sample).__name__}")
    problem = nesting_problem(sample)
    if problem:
        raise FormatError(f"sample: {problem}")
    return sample


def _values_of(unpacker: msgpack.Unpacker) -> Iterator[Any]:
    try:
        yield from unpacker
    except msgpack.StackError:  # its message is empty
        raise FormatError(f"a sample of block is {_STACK_MESSAGE}") from None


# Above this average sample size a block is unpacked sample by sample from its offsets (no copy
# of the block into the unpacker's buffer); below it, one streaming unpacker is faster.
_PER_SAMPLE_BYTES = 16 << 10


def decode_block_samples(
    block: bytes | memoryview, expected: int, offsets: Sequence[int] | np.ndarray | None = None,
    views: bool = False,
) -> list[dict[str, Any]]:
    """All ``expected`` samples of a decompressed block (the hot path: C-level loops).

    ``offsets`` (the index's ``expected + 1`` sample offsets) lets large samples be unpacked in
    place from ``block``, which may be a view of a memory-mapped file. ``views``: large samples'
    bin values come as ``memoryview`` slices of ``block`` and arrays as views of it, without
    a copy (``sample_views.py``; for consumers that copy them out at once)."""
    if offsets is not None and expected and len(block) // expected >= _PER_SAMPLE_BYTES:
        offsets = [int(o) for o in offsets]
        if views:
            whole = memoryview(block)
            samples = []
            for i in range(expected):
                piece = whole[offsets[i] : offsets[i + 1]]
                sample = unpack_with_views(piece, _ext_hook)
                samples.append(sample if sample is not None else decode_sample(piece))
        else:
            samples = [_unpack(block[offsets[i] : offsets[i + 1]]) for i in range(expected)]
    else:
        unpacker = msgpack.Unpacker(
            ext_hook=_ext_hook, raw=False, strict_map_key=True, max_buffer_size=max(len(block), 1)
        )
        unpacker.feed(block)
        samples = []
        try:
            samples.extend(unpacker)
        except msgpack.StackError:  # its message is empty
            raise FormatError(f"sample {len(samples)} of block is {_STACK_MESSAGE}") from None
    if len(samples) != expected:
        raise FormatError(f"block holds {len(samples)} samples, index says {expected}")
    if not all(type(sample) is dict for sample in samples):
        bad = next(i for i, sample in enumerate(samples) if type(sample) is not dict)
        raise FormatError(f"sample {bad} of block: expected a map, got {type(samples[bad]).__name__}")
    if not _DECODED_CONTAINERS.isdisjoint(map(type, chain.from_iterable(map(dict.values, samples)))):
        for index, sample in enumerate(samples):  # SV3; only blocks that hold lists or maps
            problem = nesting_problem(sample)
            if problem:
                raise FormatError(f"sample {index} of block: {problem}")
    return samples
