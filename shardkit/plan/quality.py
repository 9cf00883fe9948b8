"""Shuffle quality, measured on a plan (specs/partition.md, "Shuffle quality", G4 in docs/guarantees.md).

Two numbers trade against I/O locality: how many distinct shards feed a batch (more = better
mixing, more shards open at once) and the lag-1 correlation of neighbouring samples' manifest
positions (1.0 = sequential read, about 0 = well mixed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from math import lgamma
from typing import Any

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.params import PlanParams
from shardkit.plan.plan import Plan

log = logging.getLogger(__name__)


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


# ---- label diversity against a uniform shuffle (P14) -------------------------------------------

POOR_RATIO = 0.5  # below this fraction of a uniform shuffle's distinct labels, warn
MAX_MEASURED_CONSUMERS = 64


@dataclass(frozen=True)
class LabelQuality:
    """Distinct values of a label field per local batch: this plan vs a uniform shuffle."""

    field: str
    batch_size: int
    num_batches: int  # batches measured
    distinct: float  # mean distinct labels per batch under the plan
    uniform: float  # expected distinct labels per batch under a uniform shuffle
    ratio: float  # distinct / uniform

    @property
    def poor(self) -> bool:
        return self.ratio < POOR_RATIO

    def to_dict(self) -> dict[str, float | int | str | bool]:
        return {**asdict(self), "poor": self.poor}


def distinct_per_batch(
    plan: Plan, labels: np.ndarray, num_batches: int = 20, consumers: Sequence[int] | None = None
) -> float:
    """Mean distinct ``labels[global_index]`` per batch over consumers' first batches."""
    counts = _distinct_counts(plan, labels, num_batches, consumers)
    return float(np.mean(counts)) if counts else 0.0


def _distinct_counts(
    plan: Plan, labels: np.ndarray, num_batches: int, consumers: Sequence[int] | None
) -> list[int]:
    if consumers is None:
        step = max(1, plan.num_consumers // MAX_MEASURED_CONSUMERS)
        consumers = range(0, plan.num_consumers, step)
    batch = plan.params.batch_size
    counts: list[int] = []
    for consumer in consumers:
        indices, _ = first_indices(plan, consumer, num_batches * batch)
        values = labels[indices]
        counts.extend(len(np.unique(values[lo : lo + batch])) for lo in range(0, len(values) - batch + 1, batch))
    return counts


def uniform_distinct(labels: np.ndarray, batch_size: int) -> float:
    """Expected distinct labels in ``batch_size`` samples drawn without replacement, uniformly:
    ``sum over labels v of 1 - C(N - n_v, B) / C(N, B)``."""
    return uniform_distinct_of_counts(np.unique(labels, return_counts=True)[1], batch_size)


def uniform_distinct_of_counts(counts: np.ndarray, batch_size: int) -> float:
    """:func:`uniform_distinct` for labels held by ``counts[v]`` samples each (zeros allowed)."""
    total = int(np.sum(counts))
    batch = min(batch_size, total)
    if batch == 0:
        return 0.0
    left = total - counts[counts > 0].astype(np.float64)  # samples of other labels

    def log_choose_ratio(other: float) -> float:  # log C(other, B) - log C(N, B)
        if other < batch:
            return float("-inf")
        return lgamma(other + 1) - lgamma(other - batch + 1) - lgamma(total + 1) + lgamma(total - batch + 1)

    missing = np.exp([log_choose_ratio(other) for other in left])
    return float(np.sum(1.0 - missing))


def label_quality(
    plan: Plan, labels: np.ndarray, field: str, num_batches: int = 20, consumers: Sequence[int] | None = None
) -> LabelQuality:
    """P14: the plan's distinct labels per batch against a uniform shuffle's (``labels`` holds
    one value per sample, manifest order; any dtype ``np.unique`` sorts)."""
    if len(labels) != int(plan.shard_offsets[-1]):
        raise PlanError(f"labels: expected one per sample ({int(plan.shard_offsets[-1])}), got {len(labels)}")
    counts = _distinct_counts(plan, labels, num_batches, consumers)
    distinct = float(np.mean(counts)) if counts else 0.0
    uniform = uniform_distinct(labels, plan.params.batch_size)
    ratio = distinct / uniform if uniform else 1.0
    return LabelQuality(field, plan.params.batch_size, len(counts), distinct, uniform, ratio)


def quality_advice(quality: LabelQuality) -> str | None:
    """The warning for a poor ratio (None when fine): what it means and what to change."""
    if not quality.poor:
        return None
    return (
        f"batches of {quality.batch_size} hold {quality.distinct:.1f} distinct {quality.field!r} values on "
        f"average, {quality.ratio:.0%} of a uniform shuffle's {quality.uniform:.1f}: the dataset looks "
        f"sorted by {quality.field!r}. Re-pack with `shardkit pack` (shuffled by default; the dataset was "
        f"packed in source order), or raise spread / shuffle_window / interleave (more memory and cache)"
    )


def unshuffled_warning(
    order: dict[str, object] | None, labelled: Sequence[str], params: PlanParams, shards: tuple[float, float]
) -> str | None:
    """The loader's once-per-dataset warning (P14, P20): a dataset with a declared label field,
    packed in source order, whose batches draw from fewer than ``POOR_RATIO`` times the shards a
    uniform shuffle's would (``shards`` = both means, :func:`shard_mixing`; no data read). If the
    source was sorted by that label with a label per shard, that is the label ratio too;
    ``shardkit plan DATASET --quality FIELD`` measures it."""
    if not labelled or order is None or order.get("shuffled") is not False:
        return None
    found, uniform = shards
    if found >= POOR_RATIO * uniform:
        return None
    return (
        f"this dataset was written in source order (pack --no-shuffle, or a ShardWriter) and declares label field(s) "
        f"{', '.join(map(repr, labelled))}, and a batch of {params.batch_size} draws from {found:.1f} "
        f"shards on average ({found / uniform:.0%} of a uniform shuffle's {uniform:.1f}): if the source "
        f"was sorted by label, batches will hold few labels. Measure with `shardkit plan DATASET "
        f"--batch-size {params.batch_size} --quality {labelled[0]}`; re-pack without --no-shuffle (or write "
        f"through ShuffledWriter) to fix it (or raise spread / shuffle_window)"
    )


def shard_mixing(plan: Plan, num_batches: int = 2, num_consumers: int = 4) -> tuple[float, float]:
    """Mean distinct shards per batch over the first ``num_batches`` of up to ``num_consumers``
    consumers spread over the job (a few windows of plan arithmetic), and the same under a
    uniform shuffle (:func:`uniform_distinct_of_counts` of the shard sizes: O(shards))."""
    step = max(1, plan.num_consumers // num_consumers)
    found = shuffle_stats(plan, num_batches, range(0, plan.num_consumers, step)).mean_shards_per_batch
    return found, uniform_distinct_of_counts(plan.shard_sizes, plan.params.batch_size)


LABEL_FIELDS = ("label", "labels", "cls", "class", "target")
_warned: set[str] = set()


def warn_if_unshuffled(manifest: Any, plan: Plan) -> None:
    """Log :func:`unshuffled_warning` once per dataset (by fingerprint) in this process; the
    declared label fields are the schema's fields named like labels (``LABEL_FIELDS``)."""
    labelled = [name for name in LABEL_FIELDS if name in manifest.schema]
    if manifest.fingerprint in _warned or not labelled or (manifest.order or {}).get("shuffled") is not False:
        return  # the common cases cost nothing
    message = unshuffled_warning(manifest.order, labelled, plan.params, shard_mixing(plan))
    if message is not None:
        _warned.add(manifest.fingerprint)
        log.warning("%s", message)


def warn_if_poor_labels(fingerprint: str, plan: Plan, labels: np.ndarray, field: str) -> LabelQuality:
    """The loader's opt-in label warning (P20, ``quality_field=``): the label quality of
    ``shardkit plan DATASET --quality FIELD`` (:func:`label_quality` over ``labels``, one code
    per sample) and, when poor, its advice logged once per dataset and field in this process."""
    quality = label_quality(plan, labels, field)
    message = quality_advice(quality)
    key = f"{fingerprint}:{field}"
    if message is not None and key not in _warned:
        _warned.add(key)
        log.warning("%s", message)
    return quality
