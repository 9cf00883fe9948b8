"""Which global consumer a DataLoader worker serves (L4 in specs/resume-state.md; X8 in
specs/batch-transport.md).

DataLoader collects items from its workers round-robin, starting at worker 0 on every new
iteration; an item is a group of ``group`` batches of one consumer, its boundaries on multiples
of ``group`` in the consumer's sequence. After a same-topology resume, worker ``w`` of rank
``r`` serves consumer ``r·W + (w + shift) mod W``, where ``shift`` counts the whole groups the
rank's consumers had delivered: worker 0 gets the consumer whose group the checkpoint cut (or,
if none was, the one next in turn), so the resumed rank yields the uninterrupted run's remaining
batches in the same order. Pure: a function of the plan and the worker's place.
"""

from __future__ import annotations

from typing import Protocol

from shardkit.plan.params import PlanParams


class StepPlan(Protocol):
    """What counting steps and consumed offsets needs of a plan (a sample plan, a token plan)."""

    @property
    def params(self) -> PlanParams: ...

    @property
    def start_offsets(self) -> tuple[int, ...]: ...

    @property
    def num_consumers(self) -> int: ...

    @property
    def steps_per_rank(self) -> int: ...

    def num_batches(self, consumer: int) -> int: ...


def worker_consumer(plan: StepPlan, rank: int, worker: int, num_workers: int, group: int = 1) -> int:
    """The global consumer that worker ``worker`` (of ``num_workers``, 0: the training process
    reads itself) on rank ``rank`` serves when items hold ``group`` batches."""
    width = max(num_workers, 1)
    first = rank * width
    batch = plan.params.batch_size
    consumed = sum(offset // batch // group for offset in plan.start_offsets[first : first + width])
    return first + (worker + consumed) % width
