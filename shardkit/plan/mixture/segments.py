"""An epoch whose mix changes inside it: segments laid out so every consumer reaches a change
at the same step (specs/mixture.md, MX11).

An epoch with schedule changes at mixed positions ``p_1 < ... < p_K`` has ``K + 1`` segments,
each a :class:`MixedSequence` with its own exact counts. The change points are counted in the
*step-major* order of the level-0 partition: global slot ``t x R x B + r x B + b`` is position
``b`` of rank ``r``'s batch at step ``t`` (from worker ``t mod Wc`` of that rank, its local batch
``t // Wc``), pad slots skipped. Consumer ``c``'s first ``x_k[c]`` real samples are those whose
slot comes before change ``k``, so with ``p_k = step x R x B`` every rank changes its mix at that
step. The epoch sequence the plan partitions lists, consumer by consumer, its contiguous run of
each segment, then the dropped leftovers: a consumer's range is exactly its runs, so P1-P12 and
R1-R9 hold as for any sequence. Costs O(consumers x (segments + log slots)); no per-sample arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardkit.plan.params import PlanParams
from shardkit.plan.partition import Partition
from shardkit.plan.sequence import Concat, SampleSequence, Slice


class StepSlots:
    """Per consumer: how many of its real samples have a step-major slot below ``X``."""

    def __init__(self, partition: Partition, params: PlanParams) -> None:
        consumers = np.arange(partition.num_consumers, dtype=np.int64)
        self._workers = params.workers_per_rank
        self._rank, self._worker = consumers // self._workers, consumers % self._workers
        self._batches = partition.batches.astype(np.int64)
        self._real = np.array([partition.num_real(int(c)) for c in consumers], dtype=np.int64)
        self._batch = params.batch_size
        self._per_step = params.world_size * params.batch_size
        self.num_slots = partition.steps_per_rank * self._per_step

    @property
    def real(self) -> np.ndarray:
        return self._real

    def before(self, slot: int) -> np.ndarray:
        """Real samples of each consumer in global slots ``0:slot`` (step-major order)."""
        step, into = divmod(slot, self._per_step)
        whole = np.clip((step - self._worker + self._workers - 1) // self._workers, 0, self._batches)
        current = (step % self._workers == self._worker) & (step // self._workers < self._batches)
        partial = np.where(current, np.clip(into - self._rank * self._batch, 0, self._batch), 0)
        found: np.ndarray = np.minimum(whole * self._batch + partial, self._real)
        return found

    def boundary(self, position: int) -> np.ndarray:
        """Per consumer: its real samples before real slot ``position`` (step-major, pads
        skipped); all of them when ``position`` is past the real slots (the dropped tail)."""
        lo, hi = -1, self.num_slots  # invariant: sum(before(lo)) < position <= sum(before(hi)), if any
        if int(self.before(hi).sum()) < position:
            return self.before(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if int(self.before(mid).sum()) >= position:
                hi = mid
            else:
                lo = mid
        return self.before(hi)


def segmented_sequence(parts: Sequence[SampleSequence], firsts: Sequence[int], partition: Partition,
                       params: PlanParams) -> SampleSequence:
    """The level-0 epoch sequence of segments ``parts`` (segment ``k`` starts at mixed position
    ``firsts[k]``): consumer-major runs of every segment, then the segments' dropped leftovers."""
    slots = StepSlots(partition, params)
    edges = [slots.boundary(first) for first in firsts[1:]]
    bounds = np.stack([np.zeros_like(slots.real)] + edges + [slots.real])  # (segments + 1, consumers)
    runs = np.diff(bounds, axis=0)  # runs[k, c]: consumer c's samples of segment k
    starts = np.concatenate([np.zeros((len(parts), 1), dtype=np.int64), np.cumsum(runs, axis=1)], axis=1)
    pieces: list[SampleSequence] = []
    for consumer in range(partition.num_consumers):
        for k, part in enumerate(parts):
            if runs[k, consumer]:
                pieces.append(Slice(part, int(starts[k, consumer]), int(starts[k, consumer + 1])))
    for k, part in enumerate(parts):  # drop tail: what no consumer takes, in segment order
        if int(starts[k, -1]) < len(part):
            pieces.append(Slice(part, int(starts[k, -1]), len(part)))
    return Concat(pieces)
