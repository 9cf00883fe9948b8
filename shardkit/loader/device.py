"""``DevicePrefetcher``: copy batch k+1 to the GPU on a side stream while the model computes on k.

Three relations make the overlap safe: the compute stream waits for the copy's event
before using a batch (data dependency); tensors are ``record_stream``-ed on the compute stream so
the allocator does not reuse their memory while it may still be read (device lifetime); the host
batch stays referenced until its copy has completed (source contents — shardkit never refills a
host buffer). Without CUDA it simply moves batches with ``.to(device)``.

Pair it with ``ShardLoader(..., pin_memory=True)`` so the copies are true async DMA.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from shardkit.loader.ragged import Ragged


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """``batch`` with every tensor (and ``Ragged``) moved to ``device``; other values kept."""
    if isinstance(batch, (torch.Tensor, Ragged)):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Ragged):
        yield batch.values
        yield batch.offsets
    elif isinstance(batch, dict):
        for value in batch.values():
            yield from _tensors(value)
    elif isinstance(batch, (list, tuple)):
        for value in batch:
            yield from _tensors(value)


class DevicePrefetcher:
    """Iterate ``batches`` (e.g. a ``ShardLoader``), yielding them on ``device`` one copy ahead.

    A ``ShardLoader`` counts a batch as consumed when it hands it over, which here is one batch
    before the training loop sees it; ``DevicePrefetcher.state_dict()`` saves the boundary of the
    batch the loop last received, so the staged one is not counted (G5 in docs/guarantees.md). Collective like
    ``ShardLoader.state_dict``.
    """

    def __init__(self, batches: Iterable[Any], device: str | torch.device) -> None:
        self.batches = batches
        self.device = torch.device(device)
        self._snapshot: Any = None

    def __iter__(self) -> Iterator[Any]:
        if self.device.type != "cuda":
            for batch in self.batches:
                yield to_device(batch, self.device)
            return
        try:
            yield from self._cuda_iter()
        finally:  # left early (R10): the staged batch was never used; the loader continues there
            rewind = getattr(self.batches, "rewind", None)
            if self._snapshot is not None and rewind is not None:
                rewind(self._snapshot)

    def _stage(self, stream: torch.cuda.Stream, host: Any) -> tuple[Any, Any, torch.cuda.Event]:
        with torch.cuda.stream(stream):
            moved = to_device(host, self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(stream)
        return moved, host, event

    def _cuda_iter(self) -> Iterator[Any]:
        self._snapshot = None  # a boundary of this iteration only
        stream = torch.cuda.Stream(self.device)
        iterator = iter(self.batches)
        snapshot_of = getattr(self.batches, "consumed_snapshot", None)
        staged: tuple[Any, Any, torch.cuda.Event] | None
        try:
            staged = self._stage(stream, next(iterator))
        except StopIteration:
            return
        while True:
            # The boundary *before* taking the next host batch: up to the one about to be yielded.
            self._snapshot = snapshot_of() if snapshot_of is not None else None
            try:
                upcoming = next(iterator)
            except StopIteration:
                upcoming = None
            if staged is None:
                return
            moved, _host, event = staged
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(event)
            for tensor in _tensors(moved):
                tensor.record_stream(compute)
            staged = self._stage(stream, upcoming) if upcoming is not None else None
            yield moved

    def state_dict(self) -> Any:
        """The loader state up to the batch the training loop last received (not the staged one)."""
        return self.batches.state_dict(self._snapshot)  # type: ignore[attr-defined]

    def load_state_dict(self, state: Any) -> None:
        self._snapshot = None
        self.batches.load_state_dict(state)  # type: ignore[attr-defined]
