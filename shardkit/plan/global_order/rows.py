"""Rows of global batches, read from a sequence, and windows of only the rows a rank takes
(specs/partition.md P27-P34, "Global order").

A global batch is ``B_g`` consecutive positions of a sequence (:mod:`shardkit.plan.sequence`;
any :class:`SampleSequence` in output order: a dataset's, a mixture's). Its rows are those
samples *sorted by manifest-order global index* (stably; pad repeats last, in repeat order), so
rank ``r``'s rows ``r*b:(r+1)*b`` are a run of neighbouring samples of the batch - what keeps a
rank's reads local (P32). :func:`rows_window` turns any rows into a :class:`Window` that decodes
exactly them, never the rest of the sequence window they came from.

Pure and thread-safe except :class:`RowCursor`, which one consumer's iterator owns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from shardkit.plan.sequence import SampleSequence
from shardkit.plan.spans import Span, Window

_EMPTY = np.zeros(0, dtype=np.int64)
_LAST = np.iinfo(np.int64).max  # sorts pads after every real row


@dataclass(frozen=True, eq=False)
class Rows:
    """Samples as parallel arrays, one entry per row: shard (manifest order), index in the
    shard, pad flag, copy number (weighted epochs, SW8; 0 elsewhere)."""

    shard: np.ndarray
    sample: np.ndarray
    padded: np.ndarray
    copy: np.ndarray

    def __len__(self) -> int:
        return len(self.shard)

    def __getitem__(self, index: slice | np.ndarray) -> Rows:
        return Rows(self.shard[index], self.sample[index], self.padded[index], self.copy[index])

    def global_indices(self, offsets: np.ndarray) -> np.ndarray:
        indices: np.ndarray = offsets[self.shard] + self.sample
        return indices

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        if not parts:
            return Rows(_EMPTY, _EMPTY, np.zeros(0, dtype=bool), _EMPTY)
        return Rows(*(np.concatenate([getattr(p, name) for p in parts])
                      for name in ("shard", "sample", "padded", "copy")))


def window_rows(window: Window) -> Rows:
    """What ``window`` outputs, one row per output sample, in output order."""
    lengths = np.array([span.num_samples for span in window.spans], dtype=np.int64)
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    shard = np.repeat(np.array([s.shard_index for s in window.spans], dtype=np.int64), lengths)
    first = np.repeat(np.array([s.start for s in window.spans], dtype=np.int64) - starts, lengths)
    padded = np.repeat(np.array([s.padded for s in window.spans], dtype=bool), lengths)
    sample = first + np.arange(total, dtype=np.int64)
    order = window.order
    copy = window.copies if window.copies is not None else np.zeros(len(order), dtype=np.int64)
    return Rows(shard[order], sample[order], padded[order], np.asarray(copy, dtype=np.int64))


def rows_window(rows: Rows) -> Window:
    """A window outputting ``rows`` in their order that decodes only them: runs of neighbouring
    samples of one shard become one span, read front to back."""
    decode = np.lexsort((rows.sample, rows.shard, rows.padded))
    shard, sample, padded = rows.shard[decode], rows.sample[decode], rows.padded[decode]
    breaks = np.flatnonzero((np.diff(shard) != 0) | (np.diff(sample) != 1) | (np.diff(padded) != 0)) + 1
    firsts = np.concatenate([np.zeros(1, dtype=np.int64), breaks]) if len(rows) else _EMPTY
    lasts = np.concatenate([breaks, np.array([len(rows)], dtype=np.int64)]) if len(rows) else _EMPTY
    spans = tuple(Span(int(shard[a]), int(sample[a]), int(sample[z - 1]) + 1, bool(padded[a]))
                  for a, z in zip(firsts.tolist(), lasts.tolist(), strict=True))
    order = np.empty(len(rows), dtype=np.int64)
    order[decode] = np.arange(len(rows), dtype=np.int64)
    copies = rows.copy if rows.copy.any() else None
    return Window(spans, order, copies)


def sorted_rows(rows: Rows, offsets: np.ndarray) -> Rows:
    """A global batch's row order (P28): real rows by global index (stable), then the pads."""
    keys = np.where(rows.padded, _LAST, rows.global_indices(offsets))
    return rows[np.argsort(keys, kind="stable")]


class RowCursor:
    """Rows of ``sequence`` for position ranges asked in increasing order.

    It keeps the sequence's current window (a shuffled window is permuted once, not once per
    global batch that falls in it) and seeks past windows no asked range touches, so a consumer
    that takes every W-th global batch costs O(window) per window it reads rows from.
    """

    def __init__(self, sequence: SampleSequence, stop: int) -> None:
        self._sequence, self._stop = sequence, stop
        self._windows: Iterator[Window] = iter(())
        self._lo = self._hi = 0  # positions the buffer holds
        self._buffer = Rows.concat([])

    def take(self, lo: int, hi: int) -> Rows:
        """Rows of positions ``lo:hi`` (``lo`` never below an earlier call's ``lo``)."""
        if lo >= self._hi or lo < self._lo:  # nothing buffered is needed: seek
            self._windows = self._sequence.windows(lo, self._stop)
            self._lo = self._hi = lo
            self._buffer = Rows.concat([])
        self._buffer, self._lo = self._buffer[lo - self._lo:], lo  # views: O(1)
        if self._hi < hi:  # one copy per window pulled, not per range asked
            parts = [self._buffer]
            while self._hi < hi:
                part = window_rows(next(self._windows))
                parts.append(part)
                self._hi += len(part)
            self._buffer = Rows.concat(parts)
        return self._buffer[: hi - lo]
