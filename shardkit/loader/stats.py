"""Loader statistics (§G10): how long the training loop waits for each batch, and throughput.

``LoaderStats`` lives in the training process and is updated by ``ShardLoader`` per batch:
wait time (from asking for the next batch to receiving it), samples, bytes. ``WorkerStats`` is
the per-consumer counter inside a worker (batches and samples produced).
Cheap by design: two ``perf_counter`` calls and a list append per step.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


@dataclass
class WorkerStats:
    consumer: int
    batches: int = 0
    samples: int = 0

    @classmethod
    def for_consumer(cls, consumer: int) -> WorkerStats:
        return cls(consumer)

    def batch_done(self, num_samples: int) -> None:
        self.batches += 1
        self.samples += num_samples


@dataclass
class LoaderStats:
    """Wait times per step and totals for the current iteration; ``summary()`` is JSON-able."""

    stall_threshold: float = 0.5  # seconds a step may wait before it counts as a stall
    stall_steps: int = 5  # consecutive stalls before one warning
    waits: list[float] = field(default_factory=list)
    samples: int = 0
    started: float = field(default_factory=time.perf_counter)
    _stalls_in_row: int = 0
    _warned: bool = False

    def reset(self) -> None:
        self.waits.clear()
        self.samples = 0
        self.started = time.perf_counter()
        self._stalls_in_row = 0
        self._warned = False

    def step(self, wait: float, num_samples: int) -> None:
        self.waits.append(wait)
        self.samples += num_samples
        if wait < self.stall_threshold:
            self._stalls_in_row = 0
            return
        self._stalls_in_row += 1
        if self._stalls_in_row >= self.stall_steps and not self._warned:
            self._warned = True
            log.warning(
                "training waited for data on %d steps in a row (last %.3f s, threshold %.3f s): the loader "
                "is the bottleneck; see loader.stats() and `shardkit bench`",
                self._stalls_in_row, wait, self.stall_threshold,
            )

    def summary(self) -> dict[str, Any]:
        waits = np.asarray(self.waits) if self.waits else np.zeros(1)
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        return {
            "steps": len(self.waits),
            "samples": self.samples,
            "samples_per_s": self.samples / elapsed,
            "wait_p50_s": float(np.percentile(waits, 50)),
            "wait_p99_s": float(np.percentile(waits, 99)),
            "wait_max_s": float(waits.max()),
            "wait_total_s": float(waits.sum()),
            "elapsed_s": elapsed,
        }
