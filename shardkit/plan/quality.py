"""Shuffle quality, measured on a plan (specs/partition.md, "Shuffle quality", G4 in docs/guarantees.md).

Two numbers trade against I/O locality: how many distinct shards feed a batch (more = better
mixing, more shards open at once) and the lag-1 correlation of neighbouring samples' manifest
positions (1.0 = sequential read, about 0 = well mixed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.plan import Plan


@dataclass(frozen=True)
class ShuffleStats:
    """Shuffle quality over the first batches of some consumers."""

    num_batches: int
    mean_shards_per_batch: float
    min_shards_per_batch: int
    max_shards_per_batch: int
    neighbour_correlation: float  # mean over consumers of corr(x[i], x[i+1])
    mean_shards_per_window: float  # locality cost: shards a reader decodes at once

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def first_indices(plan: Plan, consumer: int, num_samples: int) -> tuple[np.ndarray, list[int]]:
    """Global indices of consumer ``c``'s first ``num_samples`` samples, and the number of
    distinct shards each window that fed them decodes."""
    offsets = plan.shard_offsets
    found: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    shards_per_window: list[int] = []
    have = 0
    for window in plan.consumer_windows(consumer):
        if have >= num_samples:
            break
        found.append(window.global_indices(offsets))
        shards_per_window.append(len({span.shard_index for span in window.spans}))
        have += window.num_samples
    return np.concatenate(found)[:num_samples], shards_per_window


def shuffle_stats(
    plan: Plan, num_batches: int = 100, consumers: Sequence[int] | None = None
) -> ShuffleStats:
    """Shards per batch and neighbour correlation over each consumer's first batches.

    Costs O(num_batches * batch_size + window) per consumer measured; ``consumers`` defaults
    to all of them.
    """
    if num_batches < 1:
        raise PlanError(f"num_batches: expected >= 1, got {num_batches}")
    chosen = range(plan.num_consumers) if consumers is None else consumers
    batch = plan.params.batch_size
    shard_counts: list[int] = []
    correlations: list[float] = []
    window_shards: list[int] = []
    for consumer in chosen:
        indices, shards_per_window = first_indices(plan, consumer, num_batches * batch)
        window_shards.extend(shards_per_window)
        shards = np.searchsorted(plan.shard_offsets, indices, side="right") - 1
        for lo in range(0, len(shards), batch):
            shard_counts.append(len(np.unique(shards[lo : lo + batch])))
        if len(indices) > 2 and np.ptp(indices[:-1]) > 0 and np.ptp(indices[1:]) > 0:
            correlations.append(float(np.corrcoef(indices[:-1], indices[1:])[0, 1]))
    if not shard_counts:
        return ShuffleStats(0, 0.0, 0, 0, float("nan"), 0.0)
    return ShuffleStats(
        num_batches=len(shard_counts),
        mean_shards_per_batch=float(np.mean(shard_counts)),
        min_shards_per_batch=min(shard_counts),
        max_shards_per_batch=max(shard_counts),
        neighbour_correlation=float(np.mean(correlations)) if correlations else float("nan"),
        mean_shards_per_window=float(np.mean(window_shards)),
    )
