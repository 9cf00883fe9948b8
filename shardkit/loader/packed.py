"""One buffer per batch for the trip from a DataLoader worker to the training process.

Torch sends every tensor of a batch through its own shared-memory segment: a new segment, a
copy into it, and a file descriptor fetched over a socket from the worker (whose busy,
GIL-holding decode loop delays the answer). A batch of a dozen small tensors pays that a dozen
times. ``pack_batch`` lays every tensor of a collated batch (and the two tensors of each
``Ragged``) into one 64-byte-aligned buffer: a plain ``bytearray`` that travels inline through
the result pipe when the batch is small (below ``INLINE_BYTES``: one memcpy, no round trip), a
single shared-memory segment otherwise. ``unpack`` rebuilds the dict as zero-copy views.
Non-tensor values (lists of str …) travel as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from shardkit.loader.arena import INLINE_BYTES, Arena, aligned
from shardkit.loader.ragged import Ragged


@dataclass
class PackedBatch:
    buffer: torch.Tensor | bytearray  # uint8: one shared storage, or inline bytes
    tensors: list[tuple[str, str, tuple[int, ...], int]]  # (path, dtype name, shape, offset)
    ragged: dict[str, str]  # field → kind, for fields rebuilt as Ragged(values, offsets)
    extras: dict[str, Any]  # non-tensor fields

    def _tensor(self) -> torch.Tensor:
        if isinstance(self.buffer, bytearray):
            if not self.buffer:
                return torch.empty(0, dtype=torch.uint8)
            return torch.frombuffer(self.buffer, dtype=torch.uint8)
        return self.buffer

    def pin_memory(self, device: Any = None) -> PackedBatch:  # DataLoader's pin thread
        return PackedBatch(self._tensor().pin_memory(), self.tensors, self.ragged, self.extras)

    def unpack(self) -> dict[str, Any]:
        buffer = self._tensor()
        views: dict[str, torch.Tensor] = {}
        for path, dtype_name, shape, offset in self.tensors:
            dtype, itemsize = _dtype_of(dtype_name)
            nbytes = _numel(shape) * itemsize
            views[path] = buffer[offset : offset + nbytes].view(dtype).view(shape)
        batch: dict[str, Any] = dict(self.extras)
        for path, view in views.items():
            if "/" not in path:
                batch[path] = view
        for key, kind in self.ragged.items():
            batch[key] = Ragged(views[f"{key}/values"], views[f"{key}/offsets"], kind)
        return batch


_DTYPES: dict[str, tuple[torch.dtype, int]] = {}


def _dtype_of(name: str) -> tuple[torch.dtype, int]:
    found = _DTYPES.get(name)
    if found is None:
        dtype = getattr(torch, name)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"not a torch dtype: {name!r}")
        found = _DTYPES[name] = (dtype, torch.empty(0, dtype=dtype).element_size())
    return found


def _dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def pack_batch(batch: dict[str, Any], arena: Arena | None = None) -> PackedBatch:
    """The tensors of ``batch`` in one buffer: the ``arena`` they were collated into when all of
    them are there (no copy), else a new buffer they are copied into."""
    leaves: list[tuple[str, torch.Tensor]] = []
    ragged: dict[str, str] = {}
    extras: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.layout == torch.strided:
            leaves.append((key, value))
        elif isinstance(value, Ragged):
            leaves += [(f"{key}/values", value.values), (f"{key}/offsets", value.offsets)]
            ragged[key] = value.kind
        else:
            extras[key] = value
    if arena is not None:
        offsets = [arena.offset_of(tensor) for _, tensor in leaves]
        if all(offset is not None for offset in offsets):
            layout = [
                (path, _dtype_name(t), tuple(t.shape), int(o or 0))
                for (path, t), o in zip(leaves, offsets, strict=True)
            ]
            return PackedBatch(arena.storage, layout, ragged, extras)
    layout, total = [], 0
    for path, tensor in leaves:
        layout.append((path, _dtype_name(tensor), tuple(tensor.shape), total))
        total = aligned(total + tensor.numel() * tensor.element_size())
    packed: torch.Tensor | bytearray
    if total < INLINE_BYTES:
        packed = bytearray(total)
        buffer = torch.frombuffer(packed, dtype=torch.uint8) if total else torch.empty(0, dtype=torch.uint8)
    else:
        packed = buffer = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(total))
    for (_, tensor), (_, _, shape, offset) in zip(leaves, layout, strict=True):
        nbytes = tensor.numel() * tensor.element_size()
        buffer[offset : offset + nbytes].view(tensor.dtype).view(shape).copy_(tensor)
    return PackedBatch(packed, layout, ragged, extras)
