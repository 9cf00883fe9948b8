"""One buffer per batch for the trip from a DataLoader worker to the training process.

Torch sends every tensor of a batch through its own shared-memory segment: a new segment, a
copy into it, and a file descriptor fetched over a socket from the worker (whose busy,
GIL-holding decode loop delays the answer). A batch of a dozen small tensors pays that a dozen
times. ``pack_batch`` lays every tensor of a collated batch (and the two tensors of each
``Ragged``) into one 64-byte-aligned buffer, in order of preference:

* a slot of the loader's shared ring (``ring.py``): only the slot's name crosses the pipe;
* a fresh buffer (``buffers.py``): a ``bytearray`` inline through the pipe below 1 MiB, one
  shared-memory segment above.

``unpack`` rebuilds the dict as zero-copy views. Non-tensor values (lists of str …) travel as
they are.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data._utils.pin_memory import pin_memory as pin_any

from shardkit.loader.ragged import Ragged
from shardkit.loader.transfer.arena import Arena
from shardkit.loader.transfer.buffers import aligned, fresh_buffer
from shardkit.loader.transfer.dtypes import dtype_by_name, dtype_name, numel
from shardkit.loader.transfer.ring import SlotRef, forget, resolve


@dataclass
class PackedBatch:
    buffer: torch.Tensor | bytearray | SlotRef | np.ndarray  # uint8: shared storage, inline bytes, a ring slot
    # (its name in the pipe; the resolved array after ``_root``)
    tensors: list[tuple[str, str, tuple[int, ...], int]]  # (path, dtype name, shape, offset)
    ragged: dict[str, str]  # field → kind, for fields rebuilt as Ragged(values, offsets)
    extras: dict[str, Any]  # non-tensor fields

    def __setstate__(self, state: dict[str, Any]) -> None:  # unpickled: it crossed to the trainer
        """A batch the training process receives but never unpacks (a loop that stopped in the
        middle of a group, items DataLoader drains when persistent workers start the next epoch)
        gives its ring slot back when it is garbage, instead of holding it for the ring's
        lifetime. Only received batches do: the worker's copy of a sent batch is not the owner."""
        self.__dict__.update(state)
        if isinstance(self.buffer, SlotRef):
            self._unopened = weakref.finalize(self, forget, self.buffer)
            self._unopened.atexit = False

    def _root(self) -> torch.Tensor | np.ndarray:
        """The whole buffer: a tensor (shared or pinned storage) or a uint8 numpy array."""
        buffer = self.buffer
        if isinstance(buffer, SlotRef):  # resolve once: the slot is freed when the array dies
            buffer = self.buffer = resolve(buffer)
            unopened = self.__dict__.pop("_unopened", None)
            if unopened is not None:
                unopened.detach()  # one owner of the slot from here on: the array's finalizer
        if isinstance(buffer, bytearray):
            return np.frombuffer(buffer, dtype=np.uint8) if buffer else np.empty(0, dtype=np.uint8)
        return buffer

    def pin_memory(self, device: Any = None) -> PackedBatch:  # DataLoader's pin thread
        root = self._root()
        tensor = torch.from_numpy(root) if isinstance(root, np.ndarray) else root
        return PackedBatch(tensor.pin_memory(), self.tensors, self.ragged, self.extras)

    def unpack(self) -> dict[str, Any]:
        root = self._root()
        views: dict[str, torch.Tensor] = {}
        for path, name, shape, offset in self.tensors:
            dtype, itemsize, np_dtype = dtype_by_name(name)
            nbytes = numel(shape) * itemsize
            if isinstance(root, np.ndarray) and np_dtype is not None:  # numpy views: a few times cheaper
                views[path] = torch.from_numpy(root[offset : offset + nbytes].view(np_dtype).reshape(shape))
            else:
                buffer = root if isinstance(root, torch.Tensor) else torch.from_numpy(root)
                views[path] = buffer[offset : offset + nbytes].view(dtype).view(shape)
        batch: dict[str, Any] = dict(self.extras)
        for path, view in views.items():
            if "/" not in path:
                batch[path] = view
        for key, kind in self.ragged.items():
            batch[key] = Ragged(views[f"{key}/values"], views[f"{key}/offsets"], kind)
        return batch


@dataclass
class BatchGroup:
    """Consecutive batches of one consumer that cross from a worker as one DataLoader item.

    DataLoader's own cost per item (index queue, result queue, feeder thread, unpickling) is
    paid once per group instead of once per batch; ``ShardLoader`` hands the batches to the
    loop one by one, each with its own consumed boundary (X8)."""

    batches: list[Any]

    def pin_memory(self, device: Any = None) -> BatchGroup:  # DataLoader's pin thread
        return BatchGroup([pin_any(batch, device) for batch in self.batches])


def in_groups(batches: Iterator[Any], size: int, first_index: int) -> Iterator[BatchGroup]:
    """``batches`` (of one consumer, the first being its batch number ``first_index``) in groups
    whose boundaries fall on multiples of ``size`` batches of the consumer's whole sequence, so
    a resumed run's groups line up with the uninterrupted run's (X8): the first group of a
    resumed consumer may be short, as may its last."""
    group: list[Any] = []
    want = size - first_index % size
    try:
        for batch in batches:
            group.append(batch)
            if len(group) == want:
                yield BatchGroup(group)
                group, want = [], size
    except Exception:
        if group:  # the batches made before the error still go out, and free their slots there
            yield BatchGroup(group)
        raise
    if group:
        yield BatchGroup(group)


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(item) for item in value)
    if isinstance(value, dict):
        return any(_has_tensor(item) for item in value.values())
    return False


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
                (path, dtype_name(t.dtype), tuple(t.shape), int(o or 0))
                for (path, t), o in zip(leaves, offsets, strict=True)
            ]
            return PackedBatch(arena.sealed(), layout, ragged, extras)
        arena.discard(reusable=not any(_has_tensor(value) for value in extras.values()))
    layout, total = [], 0
    for path, tensor in leaves:
        layout.append((path, dtype_name(tensor.dtype), tuple(tensor.shape), total))
        total = aligned(total + tensor.numel() * tensor.element_size())
    packed, buffer = fresh_buffer(total)
    for (_, tensor), (_, _, shape, offset) in zip(leaves, layout, strict=True):
        nbytes = tensor.numel() * tensor.element_size()
        buffer[offset : offset + nbytes].view(tensor.dtype).view(shape).copy_(tensor)
    return PackedBatch(packed, layout, ragged, extras)
