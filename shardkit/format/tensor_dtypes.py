"""Tensor dtypes numpy lacks (specs/shard-format.md SV4): bfloat16 and the float8 kinds.

They are written as an array payload (ext type 2) whose dtype field holds torch's own name
(``"bfloat16"``) and whose data is the tensor's bytes, little-endian, C order. torch is never
imported to write them (a tensor means torch is loaded) and is imported to read them.
"""

from __future__ import annotations

import importlib
import struct
import sys
from typing import Any

from shardkit.errors import FormatError

# Tensor dtypes numpy lacks (SV4): written under torch's own name with their little-endian bytes;
# the value is the item size. Only names the installed torch has are ever met.
TORCH_ONLY_DTYPES = {
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
}


def tensor_dtype_name(tensor: Any) -> str:
    """A tensor's dtype as the format names it: numpy's ``dtype.str`` (``"<f4"``), or for a dtype
    numpy lacks, torch's name (``"bfloat16"``, SV4)."""
    found = _TENSOR_DTYPES.get(tensor.dtype)
    if found is None:
        name = str(tensor.dtype).removeprefix("torch.")
        if name not in TORCH_ONLY_DTYPES:
            name = sys.modules["torch"].empty(0, dtype=tensor.dtype).numpy().dtype.str
        found = _TENSOR_DTYPES[tensor.dtype] = name
    return found


_TENSOR_DTYPES: dict[Any, str] = {}


def encode_torch_only(tensor: Any, torch: Any) -> bytes:
    """The array payload of a contiguous CPU tensor of a torch-only dtype."""
    name = str(tensor.dtype).removeprefix("torch.")
    if len(tensor.shape) > 255:
        raise TypeError(f"arrays have at most 255 dimensions, got {len(tensor.shape)}")
    # bytes in memory order (little-endian); an empty tensor may have strides view() refuses
    data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
    head = bytes([len(name)]) + name.encode("ascii") + bytes([len(tensor.shape)])
    return b"".join((head, struct.pack(f"<{len(tensor.shape)}Q", *tensor.shape), data))


def decode_torch_only(payload: bytes | memoryview, name: str) -> Any:
    """A writable tensor of a torch-only dtype (SV4) from its array payload."""
    torch = importlib.import_module("torch")
    dtype = getattr(torch, name, None)
    if dtype is None:
        raise FormatError(f"tensor of dtype {name}, which this torch ({torch.__version__}) lacks")
    start = 2 + len(name)
    ndim = payload[start - 1]
    try:
        shape = struct.unpack_from(f"<{ndim}Q", payload, start)
    except struct.error as exc:
        raise FormatError(f"malformed tensor extension header: {exc}") from None
    start += 8 * ndim
    count = 1
    for dim in shape:
        count *= dim
    if len(payload) - start != count * TORCH_ONLY_DTYPES[name]:
        raise FormatError(f"tensor extension: shape {shape} of {name} needs {count * TORCH_ONLY_DTYPES[name]} "
                          f"bytes, payload has {len(payload) - start}")
    data = bytearray(payload[start:])
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)


def torch_only_name(payload: bytes | memoryview) -> str | None:
    """The dtype name of a tensor payload if it is a torch-only one, else None."""
    if not len(payload):
        return None
    name = bytes(payload[1 : 1 + payload[0]])
    text = name.decode("ascii", "replace")
    return text if text in TORCH_ONLY_DTYPES and len(payload) > 1 + len(name) else None
