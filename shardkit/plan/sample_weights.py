"""Per-sample weights and their systematic rounding to integer multiplicities (specs/sample-weights.md).

Pure: a :class:`SampleWeights` is one float32 weight per sample of a dataset (manifest order),
normalised so the largest is 1, plus float64 running sums at the shard boundaries. An epoch
of ``T`` samples gives sample ``j`` the multiplicity ``m_j = c(X_j) - c(X_{j-1})`` with
``c(x) = floor(U + x * T / X_N)`` (``X`` the cumulative weights, ``U`` one Philox uniform per
seed and epoch): systematic rounding, so ``sum(m) = T`` and every ``m_j`` is within 1 of
``w_j * T / sum(w)`` (SW1, SW2). Memory: 4 bytes per sample (the weights) + 8 per shard.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.rng import philox_key
from shardkit.plan.spans import shard_offsets

SALT_WEIGHT_ROUNDING = 21  # the epoch's systematic-rounding offset U: (21, seed, epoch)


class SampleWeights:
    """One weight per sample (manifest order) of a dataset with ``shard_sizes``; immutable.

    ``where`` names the weights in errors (``"field 'weight' of s3://b/ds"``, ``"sample_weights"``).
    Refuses (``PlanError``, naming the first bad sample) a length other than the dataset's, a
    weight that is not a finite number >= 0, and weights that are all 0 on a non-empty dataset.
    """

    def __init__(
        self,
        weights: Sequence[float] | np.ndarray,
        shard_sizes: Sequence[int] | np.ndarray,
        where: str = "sample_weights",
    ) -> None:
        sizes = np.asarray(shard_sizes, dtype=np.int64).reshape(-1)
        values = _checked(weights, int(sizes.sum()), where)
        top = float(values.max()) if values.size else 0.0
        self.where = where
        self.shard_sizes = sizes
        self.offsets = shard_offsets(sizes)
        self.weights = (values / top if top > 0 else values).astype(np.float32)
        self.prefix = self._prefix()
        digest = hashlib.blake2b(self.weights.astype("<f4").tobytes(), digest_size=16)
        self.fingerprint = f"blake2b:{digest.hexdigest()}"

    def _prefix(self) -> np.ndarray:
        """``X`` at each shard boundary, summed shard by shard exactly as :meth:`cumulative`
        sums inside a shard, so a shard's last running sum *is* the next shard's start."""
        prefix = np.zeros(len(self.shard_sizes) + 1, dtype=np.float64)
        for shard in range(len(self.shard_sizes)):
            running = self.cumulative(shard, float(prefix[shard]))
            prefix[shard + 1] = running[-1] if running.size else prefix[shard]
        return prefix

    @property
    def num_samples(self) -> int:
        return int(self.offsets[-1])

    @property
    def total(self) -> float:
        """``X_N``: the sum of the (normalised) weights."""
        return float(self.prefix[-1])

    def cumulative(self, shard: int, start: float | None = None) -> np.ndarray:
        """``X_j`` for the samples of ``shard`` (running sums from the shard's boundary value)."""
        lo, hi = int(self.offsets[shard]), int(self.offsets[shard + 1])
        base = float(self.prefix[shard]) if start is None else start
        return base + np.cumsum(self.weights[lo:hi], dtype=np.float64)


class Rounding:
    """``c(x)``: samples of an epoch of ``total`` placed up to running weight ``x`` (monotone,
    ``c(0) = 0``, ``c(X_N) = total``). ``offset``: ``U`` itself (a mixture source's pass draws
    its own, specs/mixture.md MX17), else the epoch's."""

    def __init__(self, weights: SampleWeights, total: int, seed: int, epoch: int, offset: float | None = None) -> None:
        if total and weights.total <= 0:
            raise PlanError(f"{weights.where}: every weight is 0, but samples_per_epoch is {total}")
        self.total = total
        self._end = weights.total
        self._scale = total / self._end if self._end > 0 else 0.0
        self.offset = epoch_offset(seed, epoch) if offset is None else offset

    def __call__(self, running: np.ndarray) -> np.ndarray:
        placed = np.minimum(np.floor(self.offset + running * self._scale), self.total).astype(np.int64)
        placed[running >= self._end] = self.total  # float error never loses or adds the last sample
        return placed


def epoch_offset(seed: int, epoch: int) -> float:
    """``U`` in [0, 1): the systematic-rounding offset of ``(seed, epoch)``."""
    raw = int(np.random.Philox(key=philox_key(SALT_WEIGHT_ROUNDING, seed, epoch)).random_raw(1)[0])
    return (raw >> 11) * 2.0**-53


def multiplicities(weights: SampleWeights, total: int, seed: int, epoch: int) -> np.ndarray:
    """Every sample's multiplicity in the epoch (manifest order); O(N), for reports and tests."""
    rounding = Rounding(weights, total, seed, epoch)
    parts = [
        np.diff(rounding(np.concatenate([weights.prefix[s : s + 1], weights.cumulative(s)])))
        for s in range(len(weights.shard_sizes))
    ]
    return np.concatenate(parts + [np.zeros(0, dtype=np.int64)])


def _checked(weights: Sequence[float] | np.ndarray, num_samples: int, where: str) -> np.ndarray:
    try:
        values = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"{where}: expected one number per sample, got {type(weights).__name__} ({exc})") from None
    if values.ndim != 1 or len(values) != num_samples:
        raise PlanError(
            f"{where}: expected {num_samples} weights (one per sample, manifest order), "
            f"got an array of shape {values.shape}"
        )
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        index = int(np.argmax(bad))
        raise PlanError(f"{where}: sample {index}: weight {float(values[index])}; expected a finite number >= 0")
    if num_samples and not (values > 0).any():
        raise PlanError(f"{where}: every weight is 0; at least one sample needs a positive weight")
    return values
