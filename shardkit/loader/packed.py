"""One shared-memory buffer per batch for the trip from a DataLoader worker to the trainer.

Torch sends every tensor of a batch through its own shared-memory segment (a new segment, a
copy into it, a file descriptor over a socket). A batch of a dozen small tensors pays that a
dozen times. ``pack_batch`` lays every tensor of a collated batch (and the two tensors of each
``Ragged``) into a single 64-byte-aligned shared buffer; ``unpack`` rebuilds the dict as
zero-copy views. Non-tensor values (lists of str …) travel as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from shardkit.loader.ragged import Ragged

_ALIGN = 64


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass
class PackedBatch:
    buffer: torch.Tensor  # uint8, one shared storage
    tensors: list[tuple[str, str, tuple[int, ...], int]]  # (path, dtype name, shape, offset)
    ragged: dict[str, str]  # field → kind, for fields rebuilt as Ragged(values, offsets)
    extras: dict[str, Any]  # non-tensor fields

    def pin_memory(self, device: Any = None) -> PackedBatch:  # DataLoader's pin thread
        return PackedBatch(self.buffer.pin_memory(), self.tensors, self.ragged, self.extras)

    def unpack(self) -> dict[str, Any]:
        views: dict[str, torch.Tensor] = {}
        for path, dtype_name, shape, offset in self.tensors:
            dtype = getattr(torch, dtype_name)
            nbytes = _numel(shape) * torch.empty(0, dtype=dtype).element_size()
            views[path] = self.buffer[offset : offset + nbytes].view(dtype).view(shape)
        batch: dict[str, Any] = dict(self.extras)
        for path, view in views.items():
            if "/" not in path:
                batch[path] = view
        for key, kind in self.ragged.items():
            batch[key] = Ragged(views[f"{key}/values"], views[f"{key}/offsets"], kind)
        return batch


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def pack_batch(batch: dict[str, Any]) -> PackedBatch:
    """Copy the tensors of ``batch`` into one shared buffer (one copy; the worker's originals die)."""
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
    layout, total = [], 0
    for path, tensor in leaves:
        layout.append((path, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), total))
        total = _aligned(total + tensor.numel() * tensor.element_size())
    storage = torch.UntypedStorage._new_shared(max(total, 1))
    buffer = torch.empty(0, dtype=torch.uint8).set_(storage)
    for (_, tensor), (_, _, shape, offset) in zip(leaves, layout, strict=True):
        nbytes = tensor.numel() * tensor.element_size()
        buffer[offset : offset + nbytes].view(tensor.dtype).view(shape).copy_(tensor)
    return PackedBatch(buffer, layout, ragged, extras)
