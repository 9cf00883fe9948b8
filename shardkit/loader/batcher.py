"""The pure half of a consumer's stream: windows of samples in plan order → batches of samples.

No torch, no I/O, no allocation policy: ``cut_batches`` only regroups what the reader yields
into runs of exactly ``batch_size`` samples (cutting column pieces and lists where a batch
ends), each with its samples' global indices and pad flags. Collation and transport are the
emitter's (``emitter.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from shardkit.errors import PlanError
from shardkit.read.shard_reader import SampleChunk
from shardkit.read.stream import WindowSamples


@dataclass
class BatchCut:
    """One batch's samples, not yet collated: ``parts`` in order (sample-dict lists and column
    pieces), and per sample its global index and whether it pads the tail."""

    parts: list[SampleChunk]
    indices: np.ndarray
    padded: np.ndarray


def cut_batches(windows: Iterable[WindowSamples], batch_size: int, consumer: int) -> Iterator[BatchCut]:
    """Every ``batch_size`` samples of ``windows`` as one ``BatchCut``. The plan gives each
    consumer whole batches, so samples left over mean plan and reader disagree: ``PlanError``."""
    pending: list[SampleChunk] = []  # lists of sample dicts and column pieces, in order
    waiting = 0  # samples in pending
    indices: list[np.ndarray] = []
    padded: list[np.ndarray] = []
    for window in windows:
        pending.append(window.samples)
        waiting += len(window.samples)
        indices.append(window.indices)
        padded.append(window.padded)
        while waiting >= batch_size:
            all_indices, all_padded = np.concatenate(indices), np.concatenate(padded)
            parts = _take(pending, batch_size)
            waiting -= batch_size
            yield BatchCut(parts, all_indices[:batch_size], all_padded[:batch_size])
            indices, padded = [all_indices[batch_size:]], [all_padded[batch_size:]]
    if waiting:
        raise PlanError(f"consumer {consumer}: {waiting} samples left over; plan and reader disagree")


def _take(pending: list[SampleChunk], count: int) -> list[SampleChunk]:
    """The first ``count`` samples of ``pending`` (removed from it), as whole or cut parts."""
    parts: list[SampleChunk] = []
    while count:
        head = pending[0]
        if len(head) <= count:
            parts.append(pending.pop(0))
            count -= len(head)
        else:
            parts.append(head[:count])
            pending[0] = head[count:]
            count = 0
    return parts
