"""The sources' interleave (specs/mixture.md MX3): :class:`Interleave`, exact integer keys, and its
prefix at many positions at once (:func:`interleave_prefixes`, used by MX12).

``prefix(p)`` holds, per source, its samples among the first ``p`` of the merged key order
(keys ``(2r + 1) / (2 q_i)``, ties to the lower source). The keys ``<= p / T`` number
``floor((2 p q_i + T) / (2 T))`` per source, within ``sources / 2`` of ``p`` in all; the last
keys are then dropped, or the next ones added, one at a time, compared exactly by
cross-multiplication. int64 throughout: callers check ``4 T max(q) < 2^62``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardkit.errors import PlanError


def interleave_prefixes(counts: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``prefix(p)`` for every ``p`` in ``positions`` (each in ``0..sum(counts)``): shape
    ``(len(positions), len(counts))``; O(positions x sources^2) numpy work."""
    total = int(counts.sum())
    p = positions.astype(np.int64)
    found: np.ndarray = np.minimum((2 * p[:, None] * counts[None, :] + total) // max(2 * total, 1), counts[None, :])
    rows = np.arange(len(p))
    while True:
        excess = found.sum(axis=1) - p
        if not excess.any():
            return found
        best = _extreme_key(found, counts, excess > 0)
        found[rows, best] -= np.sign(excess) * (best >= 0)


def _extreme_key(found: np.ndarray, q: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """Per row, the source of the last taken key (``drop``) or of the next untaken key (else),
    ties to the higher source when dropping and the lower when adding; -1 when none."""
    best = np.full(len(found), -1, dtype=np.int64)
    best_num, best_q = np.zeros(len(found), dtype=np.int64), np.ones(len(found), dtype=np.int64)
    for i, qi in enumerate(q.tolist()):
        c = found[:, i]
        num = np.where(drop, 2 * c - 1, 2 * c + 1)  # key (2r + 1) / (2 q_i) of rank c - 1 or c
        ok = np.where(drop, c > 0, c < qi)
        # compare num / qi with best_num / best_q exactly (both sides < 2^62)
        left, right = num * best_q, best_num * qi
        better = ok & ((best < 0) | np.where(drop, left >= right, left < right))
        best = np.where(better, i, best)
        best_num, best_q = np.where(better, num, best_num), np.where(better, qi, best_q)
    return best


_WAYS = 64  # thresholds tried per round of prefix()'s search


def _at_most_rows(q: np.ndarray, scale: int, thresholds: np.ndarray) -> np.ndarray:
    """Row ``j``: per source, its keys <= ``thresholds[j]`` (:meth:`Interleave._at_most`, int64)."""
    ceil = -(-2 * q[None, :] * (thresholds[:, None] + 1) // scale)
    found: np.ndarray = np.minimum(np.maximum(ceil // 2, 0), q[None, :])
    return found


class Interleave:
    """The merged key order of the sources' samples, with exact integer keys.

    ``key(i, r) = floor((2r + 1) * L / (2 q_i))`` with ``L = 4 max(q)^2 + 1`` orders exactly as
    the rationals ``(2r + 1) / (2 q_i)`` (distinct ones differ by >= 1/L).
    """

    def __init__(self, counts: Sequence[int]) -> None:
        self.counts = [int(c) for c in counts]
        self.total = sum(self.counts)
        self._scale = 4 * max(self.counts + [1]) ** 2 + 1
        # int64 counts for prefix()'s vector search while 2 q (threshold + 1) fits, else None
        fits = 2 * max(self.counts + [1]) * self._scale < 2**62
        self._q: np.ndarray | None = np.array(self.counts, dtype=np.int64) if fits else None

    def _at_most(self, threshold: int) -> list[int]:
        """Per source: keys <= threshold."""
        found = []
        for q in self.counts:
            ceil = -(-2 * q * (threshold + 1) // self._scale)
            found.append(min(max(ceil // 2, 0), q))
        return found

    def prefix(self, position: int) -> list[int]:
        """Per source: samples among the first ``position`` of the merged order; O(n log L)
        numpy work while the keys fit int64 (a 65-way search of the threshold), else
        :meth:`prefix_exact`."""
        if not 0 <= position <= self.total:
            raise PlanError(f"interleave position {position} outside 0..{self.total}")
        if position == self.total:
            return list(self.counts)
        if position == 0:
            return [0] * len(self.counts)
        if self._q is None:
            return self.prefix_exact(position)
        q, scale = self._q, self._scale
        # invariant: sum(at_most(lo)) < position <= sum(at_most(hi)). Each source's count at a
        # threshold t is within one of q_i (t + 1) / L, so t lies within (n + 1) L / T of p L / T.
        guess, width = position * scale // self.total, (len(self.counts) + 1) * scale // self.total + 1
        lo, hi = max(guess - width, -1), min(guess + width, scale)
        ends = _at_most_rows(q, scale, np.array([lo, hi], dtype=np.int64)).sum(axis=1)
        if not (lo == -1 or ends[0] < position) or not position <= ends[1]:
            lo, hi = -1, scale
        while hi - lo > 1:
            step = max((hi - lo) // (_WAYS + 1), 1)
            candidates = np.arange(lo + step, hi, step, dtype=np.int64)[:_WAYS]
            sums = _at_most_rows(q, scale, candidates).sum(axis=1)
            reached = int(np.searchsorted(sums, position, side="left"))  # sums ascend with the threshold
            if reached < len(candidates):
                hi = int(candidates[reached])
            if reached > 0:
                lo = int(candidates[reached - 1])
        below, upto = _at_most_rows(q, scale, np.array([hi - 1, hi], dtype=np.int64))
        need = position - int(below.sum())
        below[np.flatnonzero(upto > below)[:need]] += 1  # ties: lower source first
        found: list[int] = below.tolist()
        return found

    def prefix_exact(self, position: int) -> list[int]:
        """:meth:`prefix` in exact Python ints: a bisection of the threshold."""
        lo, hi = -1, self._scale  # invariant: sum(at_most(lo)) < position <= sum(at_most(hi))
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if sum(self._at_most(mid)) >= position:
                hi = mid
            else:
                lo = mid
        below, upto = self._at_most(hi - 1), self._at_most(hi)
        need = position - sum(below)
        for i, (a, b) in enumerate(zip(below, upto, strict=True)):  # ties: lower source first
            if b > a and need:
                below[i] += 1
                need -= 1
        return below

    def prefixes(self, positions: np.ndarray) -> np.ndarray:
        """:meth:`prefix` of every position, shape ``(len(positions), sources)`` (vectorised)."""
        p = np.asarray(positions, dtype=np.int64).reshape(-1)
        if len(p) and not (0 <= int(p.min()) and int(p.max()) <= self.total):
            raise PlanError(f"interleave positions outside 0..{self.total}")
        if 4 * (self.total + 1) * (max(self.counts + [1]) + 1) >= 2**62:  # exact Python ints instead
            return np.array([self.prefix(int(x)) for x in p], dtype=np.int64).reshape(len(p), len(self.counts))
        return interleave_prefixes(np.array(self.counts, dtype=np.int64), p)

    def merged(self, lo: Sequence[int], hi: Sequence[int]) -> np.ndarray:
        """Indices into the source-major list of ranks ``lo[i]:hi[i]``, in merged order."""
        # int64 keys while (2r + 1) * L fits (counts below ~1e6), else exact Python ints
        if 2 * max(self.counts + [1]) * self._scale < 2**62:  # one vector op for every source
            first = np.asarray(lo, dtype=np.int64)
            sizes = np.maximum(np.asarray(hi, dtype=np.int64) - first, 0)
            source = np.repeat(np.arange(len(sizes)), sizes)
            if not len(source):
                return np.zeros(0, dtype=np.int64)
            starts = np.cumsum(sizes) - sizes
            ranks = np.arange(len(source), dtype=np.int64) - starts[source] + first[source]
            wide = (2 * ranks + 1) * self._scale // (2 * np.asarray(self.counts, dtype=np.int64)[source])
            return np.argsort(wide, kind="stable").astype(np.int64)
        keys = [(2 * np.arange(a, b, dtype=np.int64).astype(object) + 1) * self._scale // (2 * q)
                for q, a, b in zip(self.counts, lo, hi, strict=True) if b > a]
        if not keys:
            return np.zeros(0, dtype=np.int64)
        return np.argsort(np.concatenate(keys), kind="stable").astype(np.int64)
