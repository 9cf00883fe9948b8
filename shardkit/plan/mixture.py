"""A mixture of sources at plan level: exact per-epoch counts and per-source cursors (specs/mixture.md).

Pure: a source is its name, shard sizes and weight (reading lives in ``shardkit.read``). An epoch
of a mixture is a fixed multiset: source ``i`` contributes exactly ``counts(epoch)[i]`` samples
(largest remainder of ``samples_per_epoch`` by weight, MX1), taken from its *stream* - its
samples walked in a fixed per-source order, pass after pass - starting at ``cursors(epoch)[i]``
(MX2). Costs O(sources x schedule points); no per-sample arrays.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from shardkit.errors import PlanError

COMPOSITIONS = ("random", "stratified")


@dataclass(frozen=True, eq=False)
class MixSource:
    """One source of a mixture: ``name`` (unique, stable across resumes), shard sizes, weight."""

    name: str
    shard_sizes: np.ndarray
    weight: float = 1.0
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PlanError(f"mixture source name: expected a non-empty str, got {self.name!r}")
        _check_weight(self.weight, f"source {self.name!r}: weight")
        sizes = np.asarray(self.shard_sizes, dtype=np.int64).reshape(-1)
        if sizes.size and int(sizes.min()) < 0:
            raise PlanError(f"source {self.name!r}: shard_sizes must be >= 0")
        object.__setattr__(self, "shard_sizes", sizes)

    @property
    def num_samples(self) -> int:
        return int(self.shard_sizes.sum())


@dataclass(frozen=True)
class ScheduleStep:
    """From epoch ``first_epoch`` on, the weights are ``weights`` (one per source, in order)."""

    first_epoch: int
    weights: tuple[float, ...]


@dataclass(frozen=True, eq=False)
class MixSpec:
    """Sources, epoch size, batch composition and weight schedule of a mixture.

    ``basis = (epoch, cursors)`` rebases the per-source cursors (a resume with a changed mix
    continues every source where the state left it, MX8); without it, cursors start at 0 in
    epoch 0.
    """

    sources: tuple[MixSource, ...]
    samples_per_epoch: int
    composition: str = "random"
    schedule: tuple[ScheduleStep, ...] = ()
    basis: tuple[int, tuple[int, ...]] | None = field(default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "schedule", tuple(sorted(self.schedule, key=lambda s: s.first_epoch)))
        if not self.sources:
            raise PlanError("mixture: expected at least one source")
        names = [source.name for source in self.sources]
        if len(set(names)) != len(names):
            raise PlanError(f"mixture: source names must be unique, got {names}")
        n = self.samples_per_epoch
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise PlanError(f"mixture samples_per_epoch: expected an int >= 0, got {n!r}")
        if self.composition not in COMPOSITIONS:
            raise PlanError(f"mixture composition: expected one of {COMPOSITIONS}, got {self.composition!r}")
        for step in self.schedule:
            if len(step.weights) != len(self.sources) or step.first_epoch < 0:
                raise PlanError(f"mixture schedule at epoch {step.first_epoch}: expected "
                                f"{len(self.sources)} weights and an epoch >= 0, got {step.weights}")
            for name, weight in zip(names, step.weights, strict=True):
                _check_weight(weight, f"schedule at epoch {step.first_epoch}: weight of {name!r}")
        if self.basis is not None and len(self.basis[1]) != len(self.sources):
            raise PlanError(f"mixture basis: expected {len(self.sources)} cursors, got {self.basis[1]}")
        for epoch in [0] + [step.first_epoch for step in self.schedule]:
            self.counts(epoch)  # every piece of the schedule is feasible (MX1)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(source.name for source in self.sources)

    def weights(self, epoch: int) -> tuple[float, ...]:
        """The weights in force at ``epoch`` (the last schedule step at or before it)."""
        current = tuple(source.weight for source in self.sources)
        for step in self.schedule:
            if step.first_epoch <= epoch:
                current = step.weights
        return current

    def counts(self, epoch: int) -> np.ndarray:
        """Samples of each source in ``epoch``'s multiset (MX1): largest remainder, sum exact."""
        counts = largest_remainder(self.samples_per_epoch, self.weights(epoch))
        for source, count in zip(self.sources, counts, strict=True):
            if count and not source.num_samples:
                raise PlanError(f"source {source.name!r} has no samples but its weight asks for "
                                f"{count} per epoch (epoch {epoch})")
        return counts

    def cursors(self, epoch: int) -> np.ndarray:
        """Stream position of each source at the start of ``epoch`` (MX2): the basis plus the
        counts of every epoch in between; O(schedule steps x sources)."""
        first, start = (0, (0,) * len(self.sources)) if self.basis is None else self.basis
        if epoch < first:
            raise PlanError(f"mixture cursors: epoch {epoch} is before the basis epoch {first}")
        total = np.array(start, dtype=object)  # python ints: cursors grow past int64 never
        edges = sorted({first, epoch} | {s.first_epoch for s in self.schedule if first < s.first_epoch < epoch})
        for lo, hi in zip(edges, edges[1:], strict=False):
            total = total + np.array([int(c) for c in self.counts(lo)], dtype=object) * (hi - lo)
        return np.array([int(c) for c in total], dtype=np.int64)

    def rebased(self, epoch: int, cursors: Sequence[int]) -> MixSpec:
        """The same mixture whose sources sit at ``cursors`` at the start of ``epoch``."""
        return replace(self, basis=(int(epoch), tuple(int(c) for c in cursors)))

    def fingerprint(self) -> str:
        """What every epoch's plan depends on besides params: sources, weights, schedule, basis."""
        h = hashlib.blake2b(digest_size=16, person=b"shardkit-mix-v1\0")
        h.update(repr((self.composition, self.samples_per_epoch, self.basis,
                       [(s.first_epoch, s.weights) for s in self.schedule])).encode())
        for source in self.sources:
            h.update(f"|{source.name}|{source.fingerprint}|{source.weight!r}|".encode())
            h.update(source.shard_sizes.astype("<i8").tobytes())
        return "mixspec:" + h.hexdigest()

    def digest(self, epoch: int) -> str:
        """What an epoch's plan depends on besides its params: shards, counts, cursors."""
        h = hashlib.blake2b(digest_size=16, person=b"shardkit-mix-v1\0")
        h.update(self.composition.encode())
        for source, count, cursor in zip(self.sources, self.counts(epoch), self.cursors(epoch), strict=True):
            h.update(f"|{source.name}|{source.fingerprint}|{count}|{cursor}|".encode())
            h.update(source.shard_sizes.astype("<i8").tobytes())
        return "mix:" + h.hexdigest()


def largest_remainder(total: int, weights: Sequence[float]) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total`` (Hamilton's method).

    Exact rational arithmetic; ties go to the lower index. Raises PlanError for negative,
    non-finite or all-zero weights.
    """
    exact = [Fraction(w) for w in weights]
    whole = sum(exact, Fraction(0))
    if whole <= 0:
        raise PlanError(f"mixture weights: expected a positive sum, got {list(weights)}")
    quotas = [total * w / whole for w in exact]
    counts = [math.floor(q) for q in quotas]
    left = total - sum(counts)
    ranked = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in ranked[:left]:
        counts[i] += 1
    return np.array(counts, dtype=np.int64)


def _check_weight(weight: float, what: str) -> None:
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
        raise PlanError(f"{what}: expected a finite number >= 0, got {weight!r}")
