"""Read-time mixing: a consumer reads its range from ``lanes`` places at once (P13-P15).

:class:`InterleavedRange` is an opt-in alternative to ``ShuffledRange`` (``PlanParams.interleave
> 1``). The consumer's range of the epoch sequence is cut into ``k`` equal *lanes* (contiguous
sub-ranges); window ``j`` takes the ``j``-th run of ``q = window // k`` samples of every lane and
permutes them together. A window therefore mixes samples from ``k`` far-apart places of the
range (``k`` times as many shards as a plain window when shards are larger than ``q``) at the same
window memory, while each lane is still read sequentially. The price: the ``k`` lanes' current
shards are revisited window after window, so a cached reader's working set is ``k`` shards.

Like every sequence here it is immutable, thread-safe and never allocates per-sample memory
beyond one window.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

import numpy as np

from shardkit.plan.sequence import SampleSequence, SpanSequence, window_order
from shardkit.plan.spans import Span, Window

_NO_SHARDS = np.zeros(0, dtype=np.int64)


class InterleavedRange(SampleSequence):
    """Epoch positions ``lo:hi`` read as ``lanes`` interleaved lanes, ``window`` samples per window.

    Window ``j`` holds positions ``b_l + j*q … b_l + (j+1)*q - 1`` of every lane ``l`` (clipped to
    the lane), is permuted by Philox keyed by ``key_words + (j,)``, and outputs consecutive
    positions of this sequence. Lanes differ in length by at most one sample, so every window
    but the last holds exactly ``k * q`` samples; seeking costs O(k log shards + window).
    """

    def __init__(
        self, epoch: SpanSequence, lo: int, hi: int, window: int, lanes: int, key_words: tuple[int, ...]
    ) -> None:
        epoch.check_range(lo, hi)
        length = hi - lo
        self._epoch, self._length, self._key_words = epoch, length, key_words
        self._lo = lo
        self._lanes = max(1, min(lanes, window, length))  # k * q <= window
        self._run = max(1, window // self._lanes)  # q: samples per lane per window
        self._full = (length // self._lanes) // self._run  # windows of exactly k*q (shortest lane)

    @cached_property
    def _bounds(self) -> np.ndarray:
        """Lane ``l`` is epoch positions ``bounds[l]:bounds[l+1]`` (built on first use: a plan
        makes one range per consumer and most are only measured, never read)."""
        k = self._lanes
        return self._lo + (np.arange(k + 1, dtype=np.int64) * self._length) // k

    @cached_property
    def _lengths(self) -> np.ndarray:
        return np.diff(self._bounds)

    def __len__(self) -> int:
        return self._length

    @property
    def lanes(self) -> int:
        return self._lanes

    def window_size(self, index: int) -> int:
        """Samples in window ``index`` (``k * q`` for all but the last)."""
        if index < self._full:
            return self._lanes * self._run
        left = self._lengths - index * self._run
        return int(np.clip(left, 0, self._run).sum())

    def _locate(self, position: int) -> tuple[int, int]:
        """The window holding ``position`` and that window's first position."""
        per = self._lanes * self._run
        index = min(position // per, self._full)
        first = index * per
        while position >= first + self.window_size(index):  # at most one window past the full ones
            first += self.window_size(index)
            index += 1
        return index, first

    def _lane_range(self, lane: int, index: int) -> tuple[int, int]:
        lane_lo, lane_hi = int(self._bounds[lane]), int(self._bounds[lane + 1])
        return min(lane_lo + index * self._run, lane_hi), min(lane_lo + (index + 1) * self._run, lane_hi)

    def windows(self, start: int, stop: int) -> Iterator[Window]:
        self.check_range(start, stop)
        if start == stop:
            return
        index, first = self._locate(start)
        while first < stop:
            size = self.window_size(index)
            spans: list[Span] = []
            for lane in range(self._lanes):
                spans.extend(self._epoch.spans(*self._lane_range(lane, index)))
            order = window_order(self._key_words, index, size)
            yield Window(tuple(spans), order[max(start, first) - first : min(stop, first + size) - first])
            first += size
            index += 1

    def shards(self, start: int, stop: int) -> np.ndarray:
        """Shards read for ``start:stop`` in first-read order (window, then lane)."""
        self.check_range(start, stop)
        if start == stop:
            return _NO_SHARDS
        first_index, _ = self._locate(start)
        last_index, _ = self._locate(stop - 1)
        found: list[tuple[int, int, int, int]] = []  # (window, lane, read order, shard)
        for lane in range(self._lanes):
            lane_lo = self._lane_range(lane, first_index)[0]
            lane_hi = self._lane_range(lane, last_index)[1]
            position = lane_lo
            for span in self._epoch.spans(lane_lo, lane_hi):
                window = first_index + (position - lane_lo) // self._run
                found.append((window, lane, len(found), span.shard_index))
                position += span.num_samples
        found.sort()
        return np.array([shard for *_, shard in found], dtype=np.int64)
