"""Per-sample weights inside a mixture source: its stream walks *weighted passes* (specs/mixture.md MX17).

A source given per-sample weights (a :class:`SampleWeights`, one per sample in manifest order)
keeps everything a source has - a fixed shard order, a stream repeating passes, cursors, counts
(MX1-MX3) - but each pass is the multiset ``{j x m_j}`` of its samples in pass order: the pass
holds ``L`` elements (``L`` = its samples of weight > 0), and pass ``p`` gives sample ``j`` the
multiplicity ``m_j = c_p(X_j) - c_p(X_{j-1})`` with ``c_p(x) = floor(U_p + x L / X_N)``
(systematic rounding over the manifest-order running sums ``X``, as specs/sample-weights.md
does for one dataset; ``U_p`` one Philox uniform per source and pass, key ``(23, seed, name
word, p)``). So ``sum(m) = L`` exactly and each ``m_j`` is within 1 of ``w_j L / X_N`` in every
pass, every element of a pass is taken once before the next pass starts (MX2), and the plan's
rank arithmetic (cursors, interleave, segments, remainders) is unchanged: a stream position
is an element of a weighted pass.

Copies: the ``r``-th copy of sample ``j`` in the ``k``-th pass an epoch touches (``k = p -
floor(P(e) / L)``) has copy number ``k x M + r`` (``M = floor(L / X_N) + 2`` exceeds any
multiplicity), so every element of an epoch is a distinct ``(sample, copy)``, and a transform's
``ctx.rng()`` differs between copies (SW8).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from shardkit.plan.mixture.sequence import SourceStream, name_word
from shardkit.plan.mixture.spec import MixSource
from shardkit.plan.rng import philox_key
from shardkit.plan.sample_weights import Rounding, SampleWeights
from shardkit.plan.spans import Decoded, Span, join_decoded
from shardkit.plan.weighted_sequence import WeightedSequence

SALT_MIX_PASS = 23  # a weighted source's pass p: its rounding offset U_p, key (23, seed, name word, p)
CACHED_PASSES = 2  # a window's run of a source touches at most two passes but when the pass is shorter


def pass_length(weights: SampleWeights) -> int:
    """``L``: the elements of one weighted pass, the samples of weight > 0 (a 0/1 weight is a
    filter: every kept sample once per pass)."""
    return int(np.count_nonzero(weights.weights))


def copy_stride(weights: SampleWeights) -> int:
    """``M``: more than any sample's multiplicity in a pass (the largest weight is 1)."""
    return int(pass_length(weights) / weights.total) + 2 if weights.total > 0 else 1


def pass_offset(seed: int, name: str, pass_index: int) -> float:
    """``U_p`` in [0, 1): the rounding offset of pass ``pass_index`` of source ``name``."""
    raw = int(np.random.Philox(key=philox_key(SALT_MIX_PASS, seed, name_word(name), pass_index)).random_raw(1)[0])
    return (raw >> 11) * 2.0**-53


def pass_multiplicities(weights: SampleWeights, seed: int, name: str, pass_index: int) -> np.ndarray:
    """Every sample's multiplicity in one weighted pass (manifest order); O(N), for reports and tests."""
    length = pass_length(weights)
    rounding = Rounding(weights, length, seed, 0, offset=pass_offset(seed, name, pass_index))
    parts = [np.diff(rounding(np.concatenate([weights.prefix[s:s + 1], weights.cumulative(s)])))
             for s in range(len(weights.shard_sizes))]
    return np.concatenate(parts + [np.zeros(0, dtype=np.int64)])


class WeightedStream(SourceStream):
    """A weighted source's epoch slice: rank ``r`` is stream position ``cursor + r``, element
    ``(cursor + r) mod L`` of weighted pass ``(cursor + r) // L`` (module doc). ``epoch_cursor``:
    the source's cursor at the start of the epoch (copy numbers count passes from it).
    Thread-safe: the pass cache is one tuple, read and replaced whole."""

    def __init__(self, weights: SampleWeights, name: str, order: np.ndarray, shard_base: int, cursor: int,
                 epoch_cursor: int, seed: int) -> None:
        self._weights, self._name, self._order, self._seed = weights, name, order, seed
        self._base, self._cursor = shard_base, cursor
        self._length = pass_length(weights)
        self._first_pass = epoch_cursor // max(self._length, 1)
        self._stride = copy_stride(weights)
        self._recent: tuple[tuple[int, WeightedSequence], ...] = ()

    @property
    def num_samples(self) -> int:
        return self._length

    def _weighted_pass(self, index: int) -> WeightedSequence:
        recent = self._recent
        for found, sequence in recent:
            if found == index:
                return sequence
        rounding = Rounding(self._weights, self._length, self._seed, 0,
                            offset=pass_offset(self._seed, self._name, index))
        sequence = WeightedSequence(self._weights, self._order, rounding, 1, None)
        self._recent = ((index, sequence),) + recent[:CACHED_PASSES - 1]
        return sequence

    def _passes(self, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
        """``(pass, first, end)``: ranks ``lo:hi`` as runs of positions inside passes."""
        n = self._length
        start, stop = self._cursor + lo, self._cursor + hi
        while start < stop:
            index, inner = divmod(start, n)
            take = min(stop - start, n - inner)
            yield index, inner, inner + take
            start += take

    def decode(self, lo: int, hi: int) -> Decoded:
        parts: list[Decoded] = []
        for index, a, b in self._passes(lo, hi):
            spans, where, copies = self._weighted_pass(index).decode(a, b)
            shifted = [Span(s.shard_index + self._base, s.start, s.end) for s in spans]
            parts.append((shifted, where, copies + (index - self._first_pass) * self._stride))
        return join_decoded(parts, [b - a for _, a, b in self._passes(lo, hi)])

    def spans(self, lo: int, hi: int) -> list[Span]:
        return self.decode(lo, hi)[0]

    def shards(self, lo: int, hi: int) -> np.ndarray:
        found = [self._weighted_pass(index).shards(a, b) + self._base for index, a, b in self._passes(lo, hi)]
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def source_stream(source: MixSource, order: np.ndarray, shard_base: int, cursor: int, epoch_cursor: int,
                  seed: int) -> SourceStream:
    """Source ``source``'s epoch slice from stream position ``cursor`` (weighted when it has
    per-sample weights)."""
    if source.sample_weights is None:
        return SourceStream(source.shard_sizes, order, shard_base, cursor, epoch_cursor)
    return WeightedStream(source.sample_weights, source.name, order, shard_base, cursor, epoch_cursor, seed)
