"""The interleave's prefix at many positions at once (specs/mixture.md MX3, used by MX12).

``prefix(p)`` holds, per source, its samples among the first ``p`` of the merged key order
(keys ``(2r + 1) / (2 q_i)``, ties to the lower source). The keys ``<= p / T`` number
``floor((2 p q_i + T) / (2 T))`` per source, within ``sources / 2`` of ``p`` in all; the last
keys are then dropped, or the next ones added, one at a time, compared exactly by
cross-multiplication. int64 throughout: callers check ``4 T max(q) < 2^62``.
"""

from __future__ import annotations

import numpy as np


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
