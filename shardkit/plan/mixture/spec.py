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
from shardkit.plan.params import MAX_INT
from shardkit.plan.sample_weights import SampleWeights

COMPOSITIONS = ("random", "stratified")
UNITS = ("samples", "tokens")


KEPT_EPOCHS = 4  # epochs whose segments a spec keeps (MixSpec.segments)


@dataclass(frozen=True, eq=False)
class MixSource:
    """One source of a mixture: ``name`` (unique, stable across resumes), shard sizes, weight."""

    name: str
    shard_sizes: np.ndarray
    weight: float = 1.0
    fingerprint: str = ""
    num_tokens: int | None = None  # tokens of all its samples, or of as many weighted elements (MX13, MX17)
    sample_weights: SampleWeights | None = None  # one weight per sample: weighted passes (MX17)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PlanError(f"mixture source name: expected a non-empty str, got {self.name!r}")
        _check_weight(self.weight, f"source {self.name!r}: weight")
        sizes = np.asarray(self.shard_sizes, dtype=np.int64).reshape(-1)
        if sizes.size and int(sizes.min()) < 0:
            raise PlanError(f"source {self.name!r}: shard_sizes must be >= 0")
        object.__setattr__(self, "shard_sizes", sizes)
        if self.num_tokens is not None and (isinstance(self.num_tokens, bool) or not isinstance(
                self.num_tokens, int | np.integer) or self.num_tokens < 0):
            raise PlanError(f"source {self.name!r}: num_tokens: expected an int >= 0, got {self.num_tokens!r}")
        if self.sample_weights is not None and not np.array_equal(self.sample_weights.shard_sizes, sizes):
            raise PlanError(f"source {self.name!r}: sample_weights are for shard sizes "
                            f"{self.sample_weights.shard_sizes.tolist()}, the source has {sizes.tolist()}")

    @property
    def weights_fingerprint(self) -> str | None:
        """The per-sample weights' fingerprint (MX17), ``None`` for an unweighted source."""
        return None if self.sample_weights is None else self.sample_weights.fingerprint

    @property
    def num_samples(self) -> int:
        return int(self.shard_sizes.sum())


@dataclass(frozen=True)
class ScheduleStep:
    """From mixed position ``first_sample`` of epoch ``first_epoch`` on, the weights are
    ``weights`` (one per source, in order). ``first_sample = 0`` changes the mix at an epoch
    boundary (MX6); a later position splits that epoch into segments (MX11)."""

    first_epoch: int
    weights: tuple[float, ...]
    first_sample: int = 0

    @property
    def at(self) -> tuple[int, int]:
        return (self.first_epoch, self.first_sample)


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
    unit: str = "samples"
    # epoch -> its segments, for the latest KEPT_EPOCHS epochs: exact counts cost Fractions per
    # source, asked for by every plan, digest and cursor of the epoch (the spec is immutable; a
    # rebased one starts empty). Bounded: a long run must not keep every epoch's counts.
    _segments: dict[int, tuple[Segment, ...]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "schedule", tuple(sorted(self.schedule, key=lambda s: s.at)))
        if not self.sources:
            raise PlanError("mixture: expected at least one source")
        names = [source.name for source in self.sources]
        if len(set(names)) != len(names):
            raise PlanError(f"mixture: source names must be unique, got {names}")
        n = self.samples_per_epoch
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_INT:
            raise PlanError(f"mixture samples_per_epoch: expected an int in 0..2**63-1, got {n!r:.40}")
        if self.composition not in COMPOSITIONS:
            raise PlanError(f"mixture composition: expected one of {COMPOSITIONS}, got {self.composition!r}")
        if self.unit not in UNITS:
            raise PlanError(f"mixture weight unit: expected one of {UNITS}, got {self.unit!r}")
        for source in self.sources:
            if self.unit == "tokens" and source.num_samples and not source.num_tokens:
                raise PlanError(f"source {source.name!r}: weights in tokens need its token total "
                                f"(num_tokens > 0), got {source.num_tokens!r}")
        for step in self.schedule:
            _check_step(step, names, n)
        if len({step.at for step in self.schedule}) != len(self.schedule):
            raise PlanError(f"mixture schedule: two changes at the same point {[s.at for s in self.schedule]}")
        if self.basis is not None and len(self.basis[1]) != len(self.sources):
            raise PlanError(f"mixture basis: expected {len(self.sources)} cursors, got {self.basis[1]}")
        for epoch in sorted({0} | {step.first_epoch for step in self.schedule}):
            self.counts(epoch)  # every piece of the schedule is feasible (MX1); each epoch once (MX6)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(source.name for source in self.sources)

    def weights(self, epoch: int) -> tuple[float, ...]:
        """The weights in force at the start of ``epoch`` (the last change at or before it)."""
        current = tuple(source.weight for source in self.sources)
        for step in self.schedule:
            if step.at <= (epoch, 0):
                current = step.weights
        return current

    def segments(self, epoch: int) -> tuple[Segment, ...]:
        """The pieces of ``epoch`` between its weight changes (MX11): one unless the schedule
        changes the mix inside the epoch. Each has its own exact counts (largest remainder)."""
        kept = self._segments
        known = kept.get(epoch)
        if known is None:
            known = kept[epoch] = self._segments_of(epoch)
            if len(kept) > KEPT_EPOCHS:  # the oldest asked for goes (pop: threads may race here)
                kept.pop(next(iter(kept)), None)
        return known

    def _segments_of(self, epoch: int) -> tuple[Segment, ...]:
        points = [(0, self.weights(epoch))] + [(s.first_sample, s.weights) for s in self.schedule
                                               if s.first_epoch == epoch and s.first_sample > 0]
        ends = [first for first, _ in points[1:]] + [self.samples_per_epoch]
        found = []
        for (first, weights), end in zip(points, ends, strict=True):
            counts = largest_remainder(end - first, self._effective(weights))
            for source, count in zip(self.sources, counts, strict=True):
                if count and not source.num_samples:
                    raise PlanError(f"source {source.name!r} has no samples but its weight asks for "
                                    f"{count} per epoch (epoch {epoch}, from sample {first})")
            counts.flags.writeable = False  # kept for the epoch (_segments): never changed in place
            found.append(Segment(first, end, tuple(float(w) for w in weights), counts))
        return tuple(found)

    def _effective(self, weights: Sequence[float]) -> list[Fraction]:
        """Weights in samples: a token weight ``w`` of a source of ``N`` samples and ``K`` tokens
        asks for ``w x N / K`` samples (its mean document is ``K / N`` tokens, MX13)."""
        if self.unit == "samples":
            return [Fraction(w) for w in weights]
        return [Fraction(w) * s.num_samples / s.num_tokens if s.num_tokens else Fraction(0)
                for w, s in zip(weights, self.sources, strict=True)]

    def counts(self, epoch: int) -> np.ndarray:
        """Samples of each source in ``epoch``'s multiset (MX1): its segments' counts summed."""
        segments = self.segments(epoch)
        total: np.ndarray = sum((segment.counts for segment in segments[1:]), segments[0].counts)
        return total

    def cursors(self, epoch: int) -> np.ndarray:
        """Stream position of each source at the start of ``epoch`` (MX2): the basis plus the
        counts of every epoch in between; O(schedule steps x sources)."""
        first, start = (0, (0,) * len(self.sources)) if self.basis is None else self.basis
        if epoch < first:
            raise PlanError(f"mixture cursors: epoch {epoch} is before the basis epoch {first}")
        total = np.array(start, dtype=object)  # python ints: cursors grow past int64 never
        changes = {s.first_epoch for s in self.schedule} | {s.first_epoch + 1 for s in self.schedule if s.first_sample}
        edges = sorted({first, epoch} | {e for e in changes if first < e < epoch})
        for lo, hi in zip(edges, edges[1:], strict=False):
            total = total + np.array([int(c) for c in self.counts(lo)], dtype=object) * (hi - lo)
        if any(int(c) > MAX_INT for c in total):
            raise PlanError(f"mixture epoch {epoch}: a source's stream position reaches {max(int(c) for c in total)}, "
                            "beyond 2**63-1; an epoch this late is not supported")
        return np.array([int(c) for c in total], dtype=np.int64)

    def rebased(self, epoch: int, cursors: Sequence[int]) -> MixSpec:
        """The same mixture whose sources sit at ``cursors`` at the start of ``epoch``."""
        return replace(self, basis=(int(epoch), tuple(int(c) for c in cursors)))

    def fingerprint(self) -> str:
        """What every epoch's plan depends on besides params: sources, weights, schedule, basis."""
        h = hashlib.blake2b(digest_size=16, person=b"shardkit-mix-v1\0")
        h.update(repr((self.composition, self.samples_per_epoch, self.basis,
                       [(s.first_epoch, s.weights) + ((s.first_sample,) if s.first_sample else ())
                        for s in self.schedule])).encode())
        for source in self.sources:
            h.update(f"|{source.name}|{source.fingerprint}|{source.weight!r}|".encode())
            if self.unit != "samples":
                h.update(f"{self.unit}:{source.num_tokens}|".encode())
            if source.sample_weights is not None:
                h.update(f"weights:{source.weights_fingerprint}|".encode())
            h.update(source.shard_sizes.astype("<i8").tobytes())
        return "mixspec:" + h.hexdigest()

    def digest(self, epoch: int) -> str:
        """What an epoch's plan depends on besides its params: shards, counts, cursors."""
        h = hashlib.blake2b(digest_size=16, person=b"shardkit-mix-v1\0")
        h.update(self.composition.encode())
        segments = self.segments(epoch)
        if len(segments) > 1:  # an epoch without inner changes keeps its version-1 digest
            h.update(repr([(g.first_sample, g.counts.tolist()) for g in segments]).encode())
        for source, count, cursor in zip(self.sources, self.counts(epoch), self.cursors(epoch), strict=True):
            h.update(f"|{source.name}|{source.fingerprint}|{count}|{cursor}|".encode())
            if source.sample_weights is not None:  # an unweighted epoch keeps its digest
                h.update(f"weights:{source.weights_fingerprint}|".encode())
            h.update(source.shard_sizes.astype("<i8").tobytes())
        return "mix:" + h.hexdigest()


@dataclass(frozen=True, eq=False)
class Segment:
    """Mixed positions ``first_sample:end`` of an epoch, drawn with ``weights``: ``counts``."""

    first_sample: int
    end: int
    weights: tuple[float, ...]
    counts: np.ndarray


def largest_remainder(total: int, weights: Sequence[float | Fraction]) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total`` (Hamilton's method).

    Exact rational arithmetic; ties go to the lower index. Raises PlanError for negative,
    non-finite or all-zero weights.
    """
    exact = [Fraction(w) for w in weights]
    whole = sum(exact, Fraction(0))
    if whole <= 0:
        raise PlanError(f"mixture weights: expected a positive sum, got {[float(w) for w in weights]}")
    quotas = [total * w / whole for w in exact]
    counts = [math.floor(q) for q in quotas]
    left = total - sum(counts)
    ranked = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in ranked[:left]:
        counts[i] += 1
    return np.array(counts, dtype=np.int64)


def _check_step(step: ScheduleStep, names: list[str], samples_per_epoch: int) -> None:
    where = f"mixture schedule at epoch {step.first_epoch}, sample {step.first_sample}"
    if len(step.weights) != len(names) or not 0 <= step.first_epoch <= MAX_INT or step.first_sample < 0:
        raise PlanError(f"{where}: expected {len(names)} weights and an epoch and sample >= 0, got {step.weights}")
    if step.first_sample and step.first_sample >= samples_per_epoch:
        raise PlanError(f"{where}: the sample must be below samples_per_epoch {samples_per_epoch} "
                        f"(a change at an epoch's end is a change at the next epoch's sample 0)")
    for name, weight in zip(names, step.weights, strict=True):
        _check_weight(weight, f"{where}: weight of {name!r}")


def _check_weight(weight: float, what: str) -> None:
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
        raise PlanError(f"{what}: expected a finite number >= 0, got {weight!r}")
