"""Equal-step arithmetic: how many samples each consumer gets (specs/partition.md, P2-P4).

Pure integer maths over counts; O(consumers) memory, no per-sample arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.params import PlanParams


@dataclass(frozen=True, eq=False)
class Partition:
    """Contiguous equal-step ranges of a length ``num_source`` sequence, one per consumer.

    Consumer ``c`` owns positions ``starts[c]:starts[c + 1]`` of the source extended by pad
    repeats; positions ``>= num_source`` are pads. Arrays are read-only.
    """

    num_source: int
    batch_size: int
    steps_per_rank: int
    batches: np.ndarray  # k_c per consumer, int64, shape (C,)
    starts: np.ndarray  # cumulative samples, int64, shape (C + 1,)

    @property
    def num_consumers(self) -> int:
        return len(self.batches)

    @property
    def num_needed(self) -> int:
        """Samples all consumers together yield: ``world_size * steps_per_rank * batch_size``."""
        return int(self.starts[-1])

    @property
    def num_dropped(self) -> int:
        return max(self.num_source - self.num_needed, 0)

    @property
    def num_padded(self) -> int:
        return max(self.num_needed - self.num_source, 0)

    def check_consumer(self, consumer: int) -> int:
        if isinstance(consumer, bool) or not isinstance(consumer, int | np.integer):
            raise PlanError(f"consumer: expected an int, got {consumer!r}")
        if not 0 <= consumer < self.num_consumers:
            raise PlanError(
                f"consumer: expected 0 <= consumer < {self.num_consumers}, got {consumer}"
            )
        return int(consumer)

    def start(self, consumer: int) -> int:
        return int(self.starts[self.check_consumer(consumer)])

    def num_samples(self, consumer: int) -> int:
        return int(self.batches[self.check_consumer(consumer)]) * self.batch_size

    def num_real(self, consumer: int) -> int:
        """Samples of consumer ``c`` that are not pad repeats (a prefix of its sequence)."""
        room = self.num_source - self.start(consumer)
        return min(max(room, 0), self.num_samples(consumer))


def steps_per_rank(num_source: int, params: PlanParams) -> int:
    """Batches every rank yields: floor (drop) or ceil (pad) of ``M / (R * B)``."""
    per_step = params.world_size * params.batch_size
    if params.tail == "drop":
        return num_source // per_step
    return -(-num_source // per_step)


def equal_steps(num_source: int, params: PlanParams, closed: bool = False) -> Partition:
    """Split ``num_source`` samples into equal-step consumer ranges (P2, P3).

    Rank r's S batches go to its workers round-robin: worker w gets ``S // Wc + (w < S % Wc)``,
    which is also the order a DataLoader asks its workers for batches. ``closed``: no step at
    all, every sample dropped (the level after a finished epoch, R10).
    """
    if num_source < 0:
        raise PlanError(f"source length: expected >= 0, got {num_source}")
    steps = 0 if closed else steps_per_rank(num_source, params)
    workers = params.workers_per_rank
    per_worker = np.full(workers, steps // workers, dtype=np.int64)
    per_worker[: steps % workers] += 1
    batches = np.tile(per_worker, params.world_size)
    starts = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum(batches * params.batch_size, out=starts[1:])
    batches.setflags(write=False)
    starts.setflags(write=False)
    return Partition(num_source, params.batch_size, steps, batches, starts)
