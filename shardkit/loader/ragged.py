"""``Ragged``: a batch of variable-length arrays (or byte strings) as one flat tensor + offsets.

A batch crosses from a DataLoader worker to the training process as two tensors (in shared
memory), never as one Python object per sample (the cost that targets T1–T2 in
benchmarks/README.md exist to avoid). Sample ``i`` is
``values[offsets[i]:offsets[i+1]]`` — a view, no copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import torch

from shardkit.format.column_parse import offsets_from_lengths
from shardkit.loader.transfer.arena import alloc, alloc_like
from shardkit.loader.transfer.dtypes import torch_dtype


def offsets_tensor(offsets: np.ndarray) -> torch.Tensor:
    """``offsets`` (int64) in a tensor from the current allocator (the batch's buffer)."""
    return alloc_like(offsets, torch.int64)


@dataclass
class Ragged:
    """``values``: (total, *trailing) tensor; ``offsets``: int64 (n + 1,); ``kind``: array|bytes."""

    values: torch.Tensor
    offsets: torch.Tensor
    kind: str = "array"

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> Ragged:
        offsets = offsets_from_lengths(np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays)))
        first = arrays[0]
        values = alloc((int(offsets[-1]), *first.shape[1:]), torch_dtype(first.dtype))
        if len(values):
            np.concatenate(arrays, out=values.numpy())
        return cls(values, offsets_tensor(offsets))

    @classmethod
    def from_bytes(cls, items: Sequence[bytes]) -> Ragged:
        offsets = offsets_from_lengths(np.fromiter(map(len, items), dtype=np.int64, count=len(items)))
        values = alloc((int(offsets[-1]),), torch.uint8)
        out = values.numpy()
        for item, start in zip(items, offsets[:-1].tolist(), strict=False):
            out[start : start + len(item)] = np.frombuffer(item, dtype=np.uint8)
        return cls(values, offsets_tensor(offsets), kind="bytes")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> Any:
        if not -len(self) <= index < len(self):
            raise IndexError(f"Ragged index {index} out of range for {len(self)} items")
        index %= len(self)
        on_cpu = self.values.device.type == "cpu"
        bounds = self.offsets.numpy() if on_cpu else self.offsets  # numpy scalars: no torch dispatch
        start, end = int(bounds[index]), int(bounds[index + 1])
        if self.kind == "bytes":
            return (self.values.numpy() if on_cpu else self.values.cpu().numpy())[start:end].tobytes()
        return self.values[start:end]

    def __iter__(self) -> Iterator[Any]:
        # One offsets read and (for bytes) one numpy view for the whole batch: indexing a tensor
        # per sample costs ~20 µs of torch overhead, as much as copying a 64 KiB payload.
        if self.values.device.type != "cpu":
            return (self[i] for i in range(len(self)))
        bounds = self.offsets.tolist()
        if self.kind == "bytes":
            flat = self.values.numpy()
            return (flat[start:end].tobytes() for start, end in pairwise(bounds))
        return (self.values[start:end] for start, end in pairwise(bounds))

    @property
    def lengths(self) -> torch.Tensor:
        return self.offsets[1:] - self.offsets[:-1]

    def tolist(self) -> list[Any]:
        return list(self)

    def to_padded(self, pad_value: float = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``(padded, mask)``: a dense (n, max_len, *trailing) tensor and a bool mask."""
        lengths = self.lengths
        width = int(lengths.max()) if len(lengths) else 0
        out = self.values.new_full((len(self), width, *self.values.shape[1:]), pad_value)
        mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
        out[mask] = self.values
        return out, mask

    def pin_memory(self, device: Any = None) -> Ragged:  # called by DataLoader's pin thread
        return Ragged(self.values.pin_memory(), self.offsets.pin_memory(), self.kind)

    def to(self, *args: Any, **kwargs: Any) -> Ragged:
        return Ragged(self.values.to(*args, **kwargs), self.offsets.to(*args, **kwargs), self.kind)
