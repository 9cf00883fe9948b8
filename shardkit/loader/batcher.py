"""The pure half of a consumer's stream: windows of samples in plan order → batches of samples.

No torch, no I/O, no allocation policy: ``cut_batches`` only regroups what the reader yields
into runs of exactly ``batch_size`` samples (cutting column pieces and lists where a batch
ends), each with its samples' global indices and pad flags. Collation and transport are the
emitter's (``emitter.py``). It keeps nothing of a window once its samples are cut but a tail
short of a batch, copied out of the window's blocks (specs/read-path.md RP10).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from shardkit.errors import PlanError
from shardkit.read.column_pieces import ColumnPiece
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
        # Hold nothing of a window but what ``pending`` keeps: the loop reads the next window
        # while these names are bound, and one batch's parts (or the window) keep every block
        # the window read alive — peak memory two windows instead of one (specs/read-path.md RP10).
        del window
        while waiting >= batch_size:
            all_indices, all_padded = np.concatenate(indices), np.concatenate(padded)
            cut = BatchCut(_take(pending, batch_size), all_indices[:batch_size], all_padded[:batch_size])
            waiting -= batch_size
            indices, padded = [all_indices[batch_size:]], [all_padded[batch_size:]]
            yield cut
            del cut
        # A tail short of a batch waits for the next window: as a slice of a joined window it
        # would keep all of that window's blocks alive while the next is read; copy its rows.
        pending = [_own_rows(part) for part in pending]
    if waiting:
        raise PlanError(f"consumer {consumer}: {waiting} samples left over; plan and reader disagree")


def _own_rows(part: SampleChunk) -> SampleChunk:
    """``part``, a column piece's rows copied out of the blocks it points into (a list of
    sample dicts holds only its own samples)."""
    if isinstance(part, ColumnPiece):
        return ColumnPiece(part.taken(), np.arange(len(part), dtype=np.int64))
    return part


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
