"""The plan of one epoch at one resume level (specs/partition.md, specs/resume-state.md).

Level 0 partitions the epoch sequence (shards in seeded order). Level L > 0 partitions the
*remainder* of level L-1 after an elastic resume. Either way the source is split into
contiguous equal-step consumer ranges; each consumer's sequence is its real samples followed by
its pad repeats. Build plans with :func:`shardkit.plan.build_plan`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.epoch_yield import check_epoch_yield
from shardkit.plan.interleave import InterleavedRange
from shardkit.plan.params import PlanParams
from shardkit.plan.partition import Partition, equal_steps
from shardkit.plan.rng import SALT_SHARD_ORDER, SALT_WINDOW, permutation, philox_key
from shardkit.plan.sequence import (
    Concat,
    Cyclic,
    EpochSequence,
    Padded,
    SampleSequence,
    ShuffledRange,
    Slice,
    SpanSequence,
)
from shardkit.plan.spans import Window, shard_offsets
from shardkit.plan.spread import stripe_block, striped


class Plan:
    """Which samples each global consumer yields, in which order, for one epoch.

    Immutable and thread-safe; construction costs O(shards + consumers) per level. Positions
    are 0-based indices into a consumer's sequence; ``start_offsets[c]`` is where consumer ``c``
    resumes (0 for a fresh or elastically re-planned epoch).
    """

    def __init__(
        self,
        shard_sizes: np.ndarray,
        params: PlanParams,
        source: SampleSequence,
        *,
        parent: tuple[Plan, dict[str, Any]] | None = None,
        start_offsets: Sequence[int] | None = None,
        closed: bool = False,
    ) -> None:
        self.shard_sizes = shard_sizes
        self.params = params
        # The sequence this level partitions (level 0: the epoch's; global order cuts a mixture's
        # or a weighted epoch's one-process sequence, specs/partition.md P29).
        self.source = source
        self._parent = parent
        self._partition: Partition = equal_steps(len(source), params, closed)
        self.closed = closed  # the level after a finished epoch: no step, its source dropped (R10)
        self.num_consumers = self._partition.num_consumers
        self.steps_per_rank = self._partition.steps_per_rank
        self.num_dropped = self._partition.num_dropped  # source samples no consumer yields (drop tail)
        self.num_padded = self._partition.num_padded  # pad repeats yielded in total (pad tail)
        offsets = start_offsets or [0] * self.num_consumers
        self.start_offsets = tuple(int(offset) for offset in offsets)

    # -- topology and counts -------------------------------------------------------------

    @property
    def level(self) -> int:
        """0 for a plan built without an elastic resume, else 1 + the parent's level."""
        return 0 if self._parent is None else self._parent[0].level + 1

    @property
    def parent_state(self) -> dict[str, Any] | None:
        """The resume state of the previous level (what ``plan_to_state`` nests as ``parent``)."""
        return None if self._parent is None else self._parent[1]

    @property
    def shard_offsets(self) -> np.ndarray:
        """Samples in shards before each shard (manifest order), length ``num_shards + 1``."""
        return shard_offsets(self.shard_sizes)

    @property
    def num_source_samples(self) -> int:
        """Samples this level partitions: N at level 0, the remainder M at level > 0."""
        return len(self.source)

    def num_batches(self, consumer: int) -> int:
        return self._partition.num_samples(consumer) // self.params.batch_size

    def num_samples(self, consumer: int) -> int:
        """Samples consumer ``c`` yields this epoch, pad repeats included (``n_c``)."""
        return self._partition.num_samples(consumer)

    def num_real_samples(self, consumer: int) -> int:
        """Samples of consumer ``c`` that are not pad repeats; they come first."""
        return self._partition.num_real(consumer)

    def with_start_offsets(self, offsets: Sequence[int]) -> Plan:
        """The same plan, resuming consumer ``c`` at ``offsets[c]`` (checked by the caller)."""
        return Plan(
            self.shard_sizes,
            self.params,
            self.source,
            parent=self._parent,
            start_offsets=offsets,
            closed=self.closed,
        )

    # -- sequences ---------------------------------------------------------------------

    def consumer_windows(self, consumer: int, start: int = 0) -> Iterator[Window]:
        """Windows covering consumer ``c``'s sequence from position ``start`` to its end.

        Seeking costs O(log shards + log consumers + window) per level, never O(start).
        """
        total = self.num_samples(consumer)
        if isinstance(start, bool) or not 0 <= start <= total:
            raise PlanError(
                f"consumer {consumer}: start must be in 0..{total} (its samples), got {start}"
            )
        return self._consumer_sequence(consumer).windows(start, total)

    def shards_of(self, consumer: int, start: int = 0) -> tuple[int, ...]:
        """Distinct shard indices consumer ``c`` reads from ``start`` on, in first-read order."""
        total = self.num_samples(consumer)
        if not 0 <= start <= total:
            raise PlanError(f"consumer {consumer}: start must be in 0..{total}, got {start}")
        return tuple(self._first_reads(consumer, start, total).tolist())

    def _first_reads(self, consumer: int, start: int, stop: int) -> np.ndarray:
        """``shards_of`` as an array (``summary`` lists every consumer's: no Python step per shard)."""
        shards = self._consumer_sequence(consumer).shards(start, stop)
        _, first = np.unique(shards, return_index=True)
        return shards[np.sort(first)]

    def remainder(self, offsets: Sequence[int]) -> SampleSequence:
        """Unconsumed real samples per consumer (from ``offsets``), then the dropped tail."""
        parts: list[SampleSequence] = []
        for consumer, offset in enumerate(offsets):
            real = self.num_real_samples(consumer)
            parts.append(Slice(self._real_sequence(consumer), min(offset, real), real))
        needed = self._partition.num_needed
        if needed < len(self.source):
            parts.append(Slice(self.source, needed, len(self.source)))
        return Concat(parts)

    def dropped_indices(self) -> np.ndarray:
        """Manifest-order global indices of the samples this level drops (``tail="drop"``; R3:
        what an audit of the whole epoch finds missing when this is the epoch's last plan)."""
        needed, total = self._partition.num_needed, len(self.source)
        offsets = self.shard_offsets
        parts = [w.global_indices(offsets) for w in Slice(self.source, min(needed, total), total).windows(
            0, max(total - needed, 0))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _real_sequence(self, consumer: int) -> SampleSequence:
        # A consumer that only yields pads starts past the source; clamp to an empty range.
        lo = min(self._partition.start(consumer), len(self.source))
        hi = lo + self._partition.num_real(consumer)
        source, params = self.source, self.params
        if self._parent is None and params.shuffle and isinstance(source, SpanSequence):
            key = (SALT_WINDOW, params.seed, params.epoch, self.level, consumer)
            if params.interleave > 1:
                return InterleavedRange(source, lo, hi, params.shuffle_window, params.interleave, key)
            return ShuffledRange(source, lo, hi, params.shuffle_window, key)
        return Slice(source, lo, hi)

    def _consumer_sequence(self, consumer: int) -> SampleSequence:
        real = self._real_sequence(consumer)
        lo = self._partition.start(consumer) + len(real) - len(self.source)
        hi = self._partition.start(consumer) + self.num_samples(consumer) - len(self.source)
        if hi <= 0:
            return real
        repeats = Cyclic(self.source, self.num_padded)
        return Concat([real, Padded(Slice(repeats, lo, hi))])

    # -- reporting ---------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """JSON-able overview for ``shardkit plan``: steps, per-consumer counts, drop/pad."""
        workers = self.params.workers_per_rank
        problem = check_epoch_yield(self.num_source_samples, self.params, self.level)  # P16, P17
        consumers = []
        for consumer in range(self.num_consumers):
            shards = self._first_reads(consumer, 0, self.num_samples(consumer)).tolist()
            consumers.append(
                {
                    "consumer": consumer,
                    "rank": consumer // workers,
                    "worker": consumer % workers,
                    "batches": self.num_batches(consumer),
                    "samples": self.num_samples(consumer),
                    "real_samples": self.num_real_samples(consumer),
                    "start_offset": self.start_offsets[consumer],
                    "num_shards": len(shards),
                    "shards": shards,
                }
            )
        return {
            "level": self.level,
            "params": self.params.to_dict(),
            "num_shards": len(self.shard_sizes),
            "num_source_samples": self.num_source_samples,
            "steps_per_rank": self.steps_per_rank,
            "num_consumers": self.num_consumers,
            "num_dropped": self.num_dropped,
            "num_padded": self.num_padded,
            "warnings": [problem.message] if problem else [],
            "consumers": consumers,
        }


def shard_order(num_shards: int, params: PlanParams) -> np.ndarray:
    """Epoch order of shard indices: seeded by (seed, epoch) when shuffling, else manifest."""
    if not params.shuffle:
        return np.arange(num_shards, dtype=np.int64)
    return permutation(philox_key(SALT_SHARD_ORDER, params.seed, params.epoch), num_shards)


def base_plan(shard_sizes: np.ndarray, params: PlanParams) -> Plan:
    """Level 0: partition the epoch sequence (P1-P6), spread over the consumers (P18)."""
    order = shard_order(len(shard_sizes), params)
    epoch = EpochSequence(shard_sizes, order, params.shuffle_window)
    if not params.shuffle or params.spread == 1:
        return Plan(shard_sizes, params, epoch)
    block = stripe_block(shard_sizes, params.spread, params.num_consumers)
    return Plan(shard_sizes, params, striped(epoch, block, params.num_consumers))


def elastic_plan(
    old: Plan, offsets: Sequence[int], params: PlanParams, state: dict[str, Any]
) -> Plan:
    """Level L+1: partition ``old``'s remainder after ``offsets`` under new params (R3-R5).

    When ``old`` is finished at ``offsets`` (every consumer at the end of its batches) its epoch
    is over on any topology (R10): the new level yields no batch and its remainder — the tail
    ``old`` dropped — stays dropped (the new level's ``dropped_indices``)."""
    finished = all(int(offset) >= old.num_samples(c) for c, offset in enumerate(offsets))
    return Plan(old.shard_sizes, params, old.remainder(offsets), parent=(old, state), closed=finished)
