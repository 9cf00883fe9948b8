"""``WeightedDataset``: a :class:`StreamingDataset` whose epochs are a weighted multiset of its samples
(specs/sample-weights.md).

``sk.StreamingDataset(path, batch_size=..., sample_weights="weight" | array, samples_per_epoch=T)``
makes one. Sample ``j`` appears ``m_j`` times per epoch (systematic rounding of its weight,
SW1-SW2), and everything else is the loader's own: equal steps, drop/pad, the consumed boundary,
same-topology and elastic resume. The loader state adds ``sample_weights`` (the weights'
fingerprint and ``samples_per_epoch``), so a resume with other weights is refused by name (SW7).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardkit.errors import PlanError, StateError
from shardkit.loader.dataset import StreamingDataset
from shardkit.loader.epoch_check import check_dataset
from shardkit.loader.loader_stats import WorkerStats
from shardkit.plan import Plan, PlanParams
from shardkit.plan.sample_weights import SampleWeights
from shardkit.plan.weighted_sequence import weighted_plan
from shardkit.read.field_values import read_numeric_field
from shardkit.read.options import ReadOptions
from shardkit.read.stream import WindowSamples
from shardkit.storage import ShardCache

WEIGHTS_KEY = "sample_weights"  # the loader state's part: {"fingerprint": str, "samples_per_epoch": int}


class WeightedDataset(StreamingDataset):
    """Batches of ``batch_size`` samples of a weighted epoch: sample ``j`` appears ``m_j`` times
    (``sum(m) = samples_per_epoch``, each ``m_j`` within 1 of ``w_j * T / sum(w)``).

    ``sample_weights``: the name of a numeric field (read once here, one pass over the dataset)
    or one number >= 0 per sample in manifest order (a numpy array, 4 bytes per sample kept).
    ``samples_per_epoch``: ``T`` (default: the dataset's sample count). Other keyword arguments
    as :class:`StreamingDataset`.
    """

    def __init__(
        self,
        path: str,
        *,
        batch_size: int,
        sample_weights: str | np.ndarray | Any,
        samples_per_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        if sample_weights is None:
            raise TypeError(
                "sample_weights=None: pass a numeric field's name or one weight per sample; "
                "for an unweighted dataset leave sample_weights out"
            )
        super().__init__(path, batch_size=batch_size, **kwargs)
        sizes = self.dataset.manifest.shard_sizes
        if isinstance(sample_weights, str):
            where = f"field {sample_weights!r} of {self.dataset.url}"
            values = read_numeric_field(self.dataset, sample_weights)
        else:
            where, values = f"sample_weights of {self.dataset.url}", sample_weights
        self.weights = SampleWeights(values, sizes, where)
        total = self.dataset.manifest.num_samples if samples_per_epoch is None else samples_per_epoch
        if isinstance(total, bool) or not isinstance(total, int | np.integer) or total < 0:
            raise PlanError(f"samples_per_epoch: expected an int >= 0, got {samples_per_epoch!r}")
        self.samples_per_epoch = int(total)
        check_dataset(self.samples_per_epoch, self.params)  # fewer samples per epoch than a batch (P16)

    def level0(self, shard_sizes: np.ndarray, params: PlanParams) -> Plan:
        """Level 0 of an epoch: the weighted multiset (SW3), partitioned as any epoch sequence."""
        return weighted_plan(self.weights, self.samples_per_epoch, params)

    # ---- the loader state: the weights it was planned with (SW7) ------------------------------
    def state_fingerprint(self, epoch: int) -> str:
        return f"{self.fingerprint}+weights:{self.weights.fingerprint}:{self.samples_per_epoch}"

    def state_part(self, epoch: int, resume: dict[str, Any] | None, received: Any) -> dict[str, Any]:
        return {WEIGHTS_KEY: {"fingerprint": self.weights.fingerprint, "samples_per_epoch": self.samples_per_epoch}}

    def load_state_part(self, state: dict[str, Any]) -> str:
        """Refuse a state planned with other weights or another epoch size, naming which."""
        if "mixture" in state:
            return super().load_state_part(state)  # refused there
        part = state.get(WEIGHTS_KEY)
        if part is None:
            raise StateError(
                f"loader state: saved without sample weights, but this dataset has "
                f"{self.weights.where}; resume it with a dataset made without sample_weights"
            )
        if not isinstance(part, dict) or sorted(part) != ["fingerprint", "samples_per_epoch"]:
            raise StateError(
                f"loader state: '{WEIGHTS_KEY}' must be an object with keys "
                f"['fingerprint', 'samples_per_epoch'], got {part!r:.200}"
            )
        if part["fingerprint"] != self.weights.fingerprint:
            raise StateError(
                f"loader state: the sample weights changed since the state was saved: weights "
                f"fingerprint {part['fingerprint']!r}, now {self.weights.fingerprint!r} "
                f"({self.weights.where}); resume with the weights the epoch was planned with"
            )
        if part["samples_per_epoch"] != self.samples_per_epoch:
            raise StateError(
                f"loader state: samples_per_epoch was {part['samples_per_epoch']!r} when the "
                f"state was saved, now {self.samples_per_epoch}; resume with the same epoch size"
            )
        return self.state_fingerprint(int(state["epoch"]))

    # ---- reading ----------------------------------------------------------------------------
    def _read_consumer(
        self, plan: Plan, consumer: int, start: int, cache: ShardCache | None, stats: WorkerStats, options: ReadOptions
    ) -> Iterator[WindowSamples]:
        """As the parent's; with a ``transform``, every copy of a sample is its own dict (SW8), so
        an in-place transform never meets a copy it already changed."""
        windows = super()._read_consumer(plan, consumer, start, cache, stats, options)
        return windows if self.transform is None else map(separate_copies, windows)


def separate_copies(window: WindowSamples) -> WindowSamples:
    """``window`` with a deep copy in place of every repeat of a sample dict already in it."""
    if not isinstance(window.samples, list):
        return window
    samples, seen = list(window.samples), set()
    for i, sample in enumerate(samples):
        if id(sample) in seen:
            samples[i] = copy.deepcopy(sample)
        seen.add(id(sample))
    return WindowSamples(samples, window.indices, window.padded, window.copies)


def weighted_class(mixture: bool) -> type[WeightedDataset]:
    """What ``StreamingDataset(path, sample_weights=...)`` makes; a mixture's weights belong to
    its sources (SW10)."""
    if mixture:
        raise TypeError(
            "sample_weights= is not an option of a mixture (SW10): give each source its own, "
            "sk.Source(path, weight=..., sample_weights='field' | array), or the source's "
            "sample_weights key in the mixture file (specs/mixture.md MX17)"
        )
    return WeightedDataset
