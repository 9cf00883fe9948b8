"""Lazy sample sequences: a plan never materialises a per-sample array over the dataset.

Every sequence knows its length and can produce :class:`Window` objects for any position range
``[start, stop)`` in O(log parts + window) time, and the shard indices that range reads. The
building blocks (specs/partition.md, "Cost model"):

- :class:`EpochSequence` - all samples of the shards in epoch order (cumulative counts + bisect);
  it and :class:`~shardkit.plan.spread.StripedSequence` (the same samples, spread) are the
  :class:`SpanSequence` sources that window shuffles draw from;
- :class:`ShuffledRange` - a range of the epoch sequence, each ``window`` samples permuted;
- :class:`Slice`, :class:`Concat`, :class:`Cyclic`, :class:`Padded` - views that compose the
  consumer sequences, the elastic remainder and the pad repeats.

All are immutable and thread-safe.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.rng import permutation, philox_key
from shardkit.plan.spans import Span, Window

_NO_SHARDS = np.zeros(0, dtype=np.int64)


def window_order(key_words: tuple[int, ...], index: int, length: int) -> np.ndarray:
    """The seeded output order of window ``index`` of ``length`` samples (P10)."""
    if length == 1:  # nothing to permute; skip deriving a key
        return np.zeros(1, dtype=np.int64)
    return permutation(philox_key(*key_words, index), length)


def window_bounds(start: int, stop: int, window: int, total: int) -> tuple[int, int]:
    """Positions ``lo:hi`` of the whole windows of ``window`` samples that touch ``start:stop``."""
    return start // window * window, min(-(-stop // window) * window, total)


def touched_windows(start: int, stop: int, window: int, total: int) -> Iterator[tuple[int, int, int, slice]]:
    """``(index, lo, hi, kept)`` of each window ``lo:hi`` of ``window`` samples (of ``total``)
    that touches ``start:stop``; ``kept`` is the part of it inside ``start:stop``, from ``lo``."""
    if start == stop:
        return
    for index in range(start // window, (stop - 1) // window + 1):
        lo = index * window
        hi = min(lo + window, total)
        yield index, lo, hi, slice(max(start, lo) - lo, min(stop, hi) - lo)


class SampleSequence(ABC):
    """An ordered, finite sequence of (shard, sample) references."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def windows(self, start: int, stop: int) -> Iterator[Window]:
        """Windows outputting exactly positions ``start:stop``, in order."""

    @abstractmethod
    def shards(self, start: int, stop: int) -> np.ndarray:
        """Shard indices (manifest order, repeats allowed) read to output ``start:stop``."""

    def check_range(self, start: int, stop: int) -> None:
        if not 0 <= start <= stop <= len(self):
            raise PlanError(f"range {start}:{stop} outside a sequence of {len(self)} samples")

    def leaves(self, start: int, stop: int) -> Iterator[tuple[SampleSequence, int, int]]:
        """Positions ``start:stop`` as ranges of the sequences this one views (:class:`Slice`
        and :class:`Concat` see through to their parts; any other sequence is a leaf)."""
        self.check_range(start, stop)
        yield self, start, stop


class SpanSequence(SampleSequence):
    """A level-0 source: its samples ``start:stop`` can be listed as spans, and unshuffled it is
    read in identity order, ``chunk`` samples per window."""

    chunk: int

    @abstractmethod
    def spans(self, start: int, stop: int) -> list[Span]:
        """The samples ``start:stop`` as non-empty spans, in sequence order."""

    def windows(self, start: int, stop: int) -> Iterator[Window]:
        self.check_range(start, stop)
        for lo in range(start, stop, self.chunk):
            hi = min(lo + self.chunk, stop)
            yield Window(tuple(self.spans(lo, hi)), np.arange(hi - lo, dtype=np.int64))


class EpochSequence(SpanSequence):
    """All samples of the shards in ``shard_order``, concatenated; identity order in chunks."""

    def __init__(self, shard_sizes: np.ndarray, shard_order: np.ndarray, chunk: int) -> None:
        self._order = shard_order
        self._sizes = shard_sizes[shard_order]
        self._cum = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(self._sizes)])
        self.chunk = chunk

    def __len__(self) -> int:
        return int(self._cum[-1])

    @property
    def shard_order(self) -> np.ndarray:
        return self._order

    def spans(self, start: int, stop: int, shard_base: int = 0) -> list[Span]:
        """The samples ``start:stop`` as non-empty spans; O(log shards + shards in range).
        ``shard_base`` is added to their shard indices (a mixture's global shards)."""
        self.check_range(start, stop)
        spans: list[Span] = []
        index = bisect.bisect_right(self._cum, start) - 1  # a searchsorted, without its ~1.5 us a call
        while start < stop:
            base = int(self._cum[index])
            end = min(stop, int(self._cum[index + 1]))
            if end > start:
                spans.append(Span(int(self._order[index]) + shard_base, start - base, end - base))
            start = max(start, end)
            index += 1
        return spans

    def shards_of_ranges(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Shards read for the non-empty position ranges ``lo[i]:hi[i]``, in order (vectorised
        :meth:`shards`: O(ranges log shards + shards listed))."""
        first = np.searchsorted(self._cum, lo, side="right") - 1
        counts = np.searchsorted(self._cum, hi, side="left") - first
        starts = np.cumsum(counts) - counts
        index = np.repeat(first - starts, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        found: np.ndarray = self._order[index[self._sizes[index] > 0]]
        return found

    def shards(self, start: int, stop: int) -> np.ndarray:
        self.check_range(start, stop)
        if start == stop:
            return _NO_SHARDS
        first = int(np.searchsorted(self._cum, start, side="right")) - 1
        last = int(np.searchsorted(self._cum, stop, side="left"))
        keep = self._sizes[first:last] > 0
        found: np.ndarray = self._order[first:last][keep]
        return found


class ShuffledRange(SampleSequence):
    """Source positions ``lo:hi`` cut into windows of ``window`` samples, each permuted.

    Window ``j`` is permuted by Philox keyed by ``key_words + (j,)``; seeking to any position
    costs one bisect plus one window permutation.
    """

    def __init__(
        self, epoch: SpanSequence, lo: int, hi: int, window: int, key_words: tuple[int, ...]
    ) -> None:
        epoch.check_range(lo, hi)
        self._epoch, self._lo, self._hi = epoch, lo, hi
        self._window = window
        self._key_words = key_words

    def __len__(self) -> int:
        return self._hi - self._lo

    def windows(self, start: int, stop: int) -> Iterator[Window]:
        self.check_range(start, stop)
        for index, w_lo, w_hi, kept in touched_windows(start, stop, self._window, len(self)):
            spans = self._epoch.spans(self._lo + w_lo, self._lo + w_hi)
            order = window_order(self._key_words, index, w_hi - w_lo)
            yield Window(tuple(spans), order[kept])

    def shards(self, start: int, stop: int) -> np.ndarray:
        self.check_range(start, stop)
        if start == stop:
            return _NO_SHARDS
        w_lo, w_hi = window_bounds(start, stop, self._window, len(self))
        return self._epoch.shards(self._lo + w_lo, self._lo + w_hi)


class Slice(SampleSequence):
    """Positions ``lo:hi`` of another sequence."""

    def __init__(self, base: SampleSequence, lo: int, hi: int) -> None:
        base.check_range(lo, hi)
        self._base, self._lo, self._hi = base, lo, hi

    def __len__(self) -> int:
        return self._hi - self._lo

    def windows(self, start: int, stop: int) -> Iterator[Window]:
        self.check_range(start, stop)
        return self._base.windows(self._lo + start, self._lo + stop)

    def leaves(self, start: int, stop: int) -> Iterator[tuple[SampleSequence, int, int]]:
        self.check_range(start, stop)
        return self._base.leaves(self._lo + start, self._lo + stop)

    def shards(self, start: int, stop: int) -> np.ndarray:
        self.check_range(start, stop)
        return self._base.shards(self._lo + start, self._lo + stop)


class Concat(SampleSequence):
    """Parts one after another; prefix sums locate a position in O(log parts)."""

    def __init__(self, parts: Sequence[SampleSequence]) -> None:
        self._parts = tuple(parts)
        lengths = np.array([len(part) for part in self._parts], dtype=np.int64)
        self._prefix = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths)])

    def __len__(self) -> int:
        return int(self._prefix[-1])

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[SampleSequence, int, int]]:
        self.check_range(start, stop)
        index = int(np.searchsorted(self._prefix, start, side="right")) - 1
        while start < stop:
            base = int(self._prefix[index])
            end = min(stop, int(self._prefix[index + 1]))
            if end > start:
                yield self._parts[index], start - base, end - base
            start = max(start, end)
            index += 1

    def windows(self, start: int, stop: int) -> Iterator[Window]:
        for part, lo, hi in self._pieces(start, stop):
            yield from part.windows(lo, hi)

    def leaves(self, start: int, stop: int) -> Iterator[tuple[SampleSequence, int, int]]:
        for part, lo, hi in self._pieces(start, stop):
            yield from part.leaves(lo, hi)

    def shards(self, start: int, stop: int) -> np.ndarray:
        found = [part.shards(lo, hi) for part, lo, hi in self._pieces(start, stop)]
        return np.concatenate(found) if found else _NO_SHARDS


class Cyclic(SampleSequence):
    """``length`` samples repeating ``base`` from its start (wrapping); used for pad repeats."""

    def __init__(self, base: SampleSequence, length: int) -> None:
        if length > 0 and len(base) == 0:
            raise PlanError(f"cannot repeat an empty sequence to {length} samples")
        self._base, self._length = base, length

    def __len__(self) -> int:
        return self._length

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        self.check_range(start, stop)
        period = len(self._base)
        while start < stop:
            cycle = start // period
            hi = min(stop - cycle * period, period)
            yield start - cycle * period, hi
            start = cycle * period + hi

    def windows(self, start: int, stop: int) -> Iterator[Window]:
        for lo, hi in self._pieces(start, stop):
            yield from self._base.windows(lo, hi)

    def shards(self, start: int, stop: int) -> np.ndarray:
        self.check_range(start, stop)
        if stop - start >= len(self._base) > 0:
            return self._base.shards(0, len(self._base))
        found = [self._base.shards(lo, hi) for lo, hi in self._pieces(start, stop)]
        return np.concatenate(found) if found else _NO_SHARDS


class Padded(SampleSequence):
    """The same samples as ``base``, every span flagged ``padded=True``."""

    def __init__(self, base: SampleSequence) -> None:
        self._base = base

    def __len__(self) -> int:
        return len(self._base)

    def windows(self, start: int, stop: int) -> Iterator[Window]:
        for window in self._base.windows(start, stop):
            spans = tuple(Span(s.shard_index, s.start, s.end, True) for s in window.spans)
            yield Window(spans, window.order)

    def shards(self, start: int, stop: int) -> np.ndarray:
        return self._base.shards(start, stop)
