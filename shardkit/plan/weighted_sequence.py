"""The epoch sequence of a weighted dataset: each sample repeated by its multiplicity (specs/sample-weights.md).

A :class:`WeightedSequence` is a :class:`SampleSequence` like the epoch sequence of one dataset,
so the partition, equal steps, pads, seeks and elastic resume of ``shardkit.plan`` apply to it
unchanged (SW4). Its ``T`` positions are the epoch's multiset in epoch shard order: the shards
in the seeded order of partition.md, each sample ``m_j`` times in a row (systematic rounding,
``shardkit.plan.sample_weights``). Window ``j`` (positions ``j*win ... (j+1)*win``) decodes the
distinct samples those positions name - once each, however many copies - and outputs the
positions permuted (Philox key ``(22, seed, epoch, j)``), or in order without shuffle; each
output carries its copy number (``Window.copies``, SW8).

Position -> sample: per-shard counts from the rounding at the shard boundaries (O(shards)),
then a bisect inside one shard's running counts (O(shard size), the last few shards cached).
Immutable and thread-safe (the cache only memoises pure results).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.params import PlanParams
from shardkit.plan.plan import Plan, shard_order
from shardkit.plan.rng import permutation, philox_key
from shardkit.plan.sample_weights import Rounding, SampleWeights
from shardkit.plan.sequence import SampleSequence, touched_windows, window_bounds
from shardkit.plan.spans import Span, Window
from shardkit.plan.state import build_plan

SALT_WEIGHT_WINDOW = 22  # window j's permutation: (22, seed, epoch, j)
SPAN_GAP = 64  # absent samples (multiplicity 0) a span reads through rather than starting a new span
CACHED_SHARDS = 4  # running counts kept per sequence (a window touches a few consecutive shards)
_NO_SHARDS = np.zeros(0, dtype=np.int64)


class WeightedSequence(SampleSequence):
    """``total`` positions: the epoch's weighted multiset, shards in ``order`` (see module doc).

    ``key = (seed, epoch)`` shuffles each window; ``None`` keeps the expanded order.
    """

    def __init__(
        self, weights: SampleWeights, order: np.ndarray, rounding: Rounding, window: int, key: tuple[int, int] | None
    ) -> None:
        self._weights, self._order, self._rounding = weights, order, rounding
        self._window, self._key = window, key
        bounds = rounding(weights.prefix)
        self._bounds = bounds  # placed samples before each shard (manifest order)
        self._counts = np.diff(bounds)[order]  # copies in each shard, epoch order
        self._cum = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(self._counts)])
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return int(self._cum[-1])

    def _firsts(self, shard: int) -> np.ndarray:
        """Position of each sample of shard ``shard`` in the shard's run (its first copy), then
        the run's length."""
        found = self._cache.get(shard)
        if found is None:
            running = self._rounding(self._weights.cumulative(shard)) - self._bounds[shard]
            found = np.concatenate([np.zeros(1, dtype=np.int64), running])
            self._cache[shard] = found
            while len(self._cache) > CACHED_SHARDS:
                self._cache.popitem(last=False)
        return found

    def windows(self, start: int, stop: int) -> Iterator[Window]:
        self.check_range(start, stop)
        for index, w_lo, w_hi, kept in touched_windows(start, stop, self._window, len(self)):
            spans, order, copies = self._content(w_lo, w_hi)
            if self._key is not None and len(order) > 1:
                permuted = permutation(philox_key(SALT_WEIGHT_WINDOW, *self._key, index), len(order))
                order, copies = order[permuted], copies[permuted]
            yield Window(tuple(spans), order[kept], copies[kept])

    def decode(self, lo: int, hi: int) -> tuple[list[Span], np.ndarray, np.ndarray]:
        """Positions ``lo:hi`` without a window order: the spans decoding their distinct samples,
        per position its index into those spans' samples, and its copy number."""
        self.check_range(lo, hi)
        return self._content(lo, hi)

    def _content(self, lo: int, hi: int) -> tuple[list[Span], np.ndarray, np.ndarray]:
        """Spans decoding the distinct samples of positions ``lo:hi``, and per position its
        index into their concatenation and its copy number (SW8)."""
        spans: list[Span] = []
        parts: list[np.ndarray] = []
        copies: list[np.ndarray] = []
        base = 0  # samples decoded by the spans so far
        rank = int(np.searchsorted(self._cum, lo, side="right")) - 1
        while lo < hi:
            first, end = int(self._cum[rank]), min(hi, int(self._cum[rank + 1]))
            if end > lo:
                shard = int(self._order[rank])
                firsts, positions = self._firsts(shard), np.arange(lo - first, end - first)
                ids = np.searchsorted(firsts, positions, side="right") - 1
                copies.append(positions - firsts[ids])
                starts, ends = _runs(ids)
                within = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(ends - starts)])
                run = np.searchsorted(starts, ids, side="right") - 1
                parts.append(base + within[run] + ids - starts[run])
                spans.extend(Span(shard, int(a), int(b)) for a, b in zip(starts, ends, strict=True))
                base += int(within[-1])
            lo = max(lo, end)
            rank += 1
        if not parts:
            return spans, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return spans, np.concatenate(parts), np.concatenate(copies)

    def shards(self, start: int, stop: int) -> np.ndarray:
        self.check_range(start, stop)
        if start == stop:
            return _NO_SHARDS
        w_lo, w_hi = window_bounds(start, stop, self._window, len(self))
        first = int(np.searchsorted(self._cum, w_lo, side="right")) - 1
        last = int(np.searchsorted(self._cum, w_hi, side="left"))
        found: np.ndarray = self._order[first:last][self._counts[first:last] > 0]
        return found


def _runs(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs ``[start, end)`` covering the sorted ``ids``, reading through gaps < ``SPAN_GAP``."""
    distinct = ids[np.concatenate([[True], ids[1:] != ids[:-1]])] if len(ids) else ids
    breaks = np.flatnonzero(np.diff(distinct) > SPAN_GAP) + 1
    starts = distinct[np.concatenate([[0], breaks])].astype(np.int64)
    ends = distinct[np.concatenate([breaks - 1, [len(distinct) - 1]])].astype(np.int64) + 1
    return starts, ends


def weighted_sequence(weights: SampleWeights, total: int, params: PlanParams) -> WeightedSequence:
    """Level 0's source: the epoch's weighted multiset of ``total`` samples; O(shards)."""
    rounding = Rounding(weights, total, params.seed, params.epoch)
    order = shard_order(len(weights.shard_sizes), params)
    key = (params.seed, params.epoch) if params.shuffle else None
    return WeightedSequence(weights, order, rounding, params.shuffle_window, key)


def _base(weights: SampleWeights, total: int, sizes: np.ndarray, params: PlanParams) -> Plan:
    return Plan(sizes, params, weighted_sequence(weights, total, params))


def weighted_plan(weights: SampleWeights, total: int, params: PlanParams, resume: dict[str, Any] | None = None) -> Plan:
    """The plan of ``params.epoch`` over the weighted multiset of ``total`` samples; ``resume``
    is a plan state saved for these very weights (P1-P12, R1-R9 hold as for one dataset)."""
    if isinstance(total, bool) or not isinstance(total, int | np.integer) or total < 0:
        raise PlanError(f"samples_per_epoch: expected an int >= 0, got {total!r}")
    return build_plan(weights.shard_sizes, params, resume, base=functools.partial(_base, weights, int(total)))
