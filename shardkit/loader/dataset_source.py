"""The epoch source of one dataset, plain or weighted (specs/partition.md, specs/sample-weights.md).

An epoch of a plain dataset is every sample once; with ``sample_weights`` it is the weighted
multiset of ``samples_per_epoch`` elements — sample ``j`` appears ``m_j`` times (SW1-SW3) —
partitioned as any epoch sequence. The loader state then adds ``sample_weights`` (the weights'
fingerprint and ``samples_per_epoch``), so a resume with other weights is refused by name (SW7).
What this source reads for the batchings: samples per consumer (``read``), tokens per sample
and the documents a token consumer needs (token blocks over a weighted dataset cut its epoch
multiset: a repeated sample is two documents, SW11).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardkit.errors import StateError
from shardkit.loader.loader_state import LoaderState
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.mixture_state import SourceTally
from shardkit.plan import Plan, PlanParams, build_plan
from shardkit.plan.any_state import SamplePlan
from shardkit.plan.global_order.state import build_global_plan
from shardkit.plan.quality import warn_if_poor_labels, warn_if_unshuffled
from shardkit.plan.sample_weights import SampleWeights
from shardkit.plan.tokens.plan import epoch_order
from shardkit.plan.weighted_sequence import weighted_plan, weighted_sequence
from shardkit.read import StoredDataset
from shardkit.read.field_values import read_label_codes
from shardkit.read.options import ReadOptions
from shardkit.read.random_access import RandomAccess
from shardkit.read.stream import WindowSamples, iter_consumer
from shardkit.read.tokens.docs import EpochDocuments
from shardkit.read.tokens.lengths import document_lengths
from shardkit.storage import ShardCache

WEIGHTS_KEY = "sample_weights"  # the loader state's part: {"fingerprint": str, "samples_per_epoch": int}


class DatasetSource:
    """One dataset as an epoch source; ``weights`` (with ``samples_per_epoch``) make it weighted."""

    def __init__(self, dataset: StoredDataset, weights: SampleWeights | None = None,
                 samples_per_epoch: int | None = None, quality_field: str | None = None) -> None:
        self.dataset = dataset
        self.weights = weights
        self._total = int(samples_per_epoch if samples_per_epoch is not None else dataset.manifest.num_samples)
        self.quality_field = quality_field  # P20: measure this field's labels per batch (opt-in)
        self._quality_measured = False
        self._lengths: np.ndarray | None = None  # tokens per sample of the token field (read once)
        self._lookup: RandomAccess | None = None

    # ---- the epoch ------------------------------------------------------------------------------
    @property
    def samples_per_epoch(self) -> int:
        return self._total

    @property
    def num_samples(self) -> int:
        """Samples stored (every shard)."""
        return self.dataset.manifest.num_samples

    @property
    def fingerprint(self) -> str:
        return self.dataset.manifest.fingerprint

    @property
    def datasets(self) -> tuple[StoredDataset, ...]:
        return (self.dataset,)

    @property
    def mixture(self) -> None:
        return None

    def epoch_fingerprint(self, epoch: int) -> str:
        if self.weights is None:
            return self.fingerprint
        return f"{self.fingerprint}+weights:{self.weights.fingerprint}:{self._total}"

    def plan(self, params: PlanParams, resume: dict[str, Any] | None = None, group: int = 1) -> SamplePlan:
        """The epoch's plan; in global order the one-process sequence cut into global batches
        (a weighted epoch's weighted sequence, P29, P35)."""
        if params.order == "global":
            if self.weights is None:
                return build_global_plan(self.dataset.manifest.shard_sizes, params, resume, group)
            weights, total = self.weights, self._total
            return build_global_plan(weights.shard_sizes, params, resume, group,
                                     lambda _, fixed: weighted_sequence(weights, total, fixed))
        if self.weights is None:
            return build_plan(self.dataset.manifest.shard_sizes, params, resume)
        return weighted_plan(self.weights, self._total, params, resume)

    def shard_sizes(self, epoch: int) -> np.ndarray:
        return np.asarray(self.dataset.manifest.shard_sizes, dtype=np.int64)

    def warn_quality(self, plan: Plan) -> None:
        """P20: from the plan's shard mixing; with ``quality_field``, from that field's values
        (``shardkit plan --quality``'s measure, once per process)."""
        if self.quality_field is None:
            warn_if_unshuffled(self.dataset.manifest, plan)
        elif not self._quality_measured:
            self._quality_measured = True
            labels = read_label_codes(self.dataset, self.quality_field)
            warn_if_poor_labels(self.fingerprint, plan, labels, self.quality_field)

    # ---- the loader state: the weights it was planned with (SW7) ------------------------------
    @property
    def part_keys(self) -> frozenset[str]:
        return frozenset({WEIGHTS_KEY}) if self.weights is not None else frozenset()

    def state_part(self, epoch: int, resume: dict[str, Any] | None, received: np.ndarray | None) -> dict[str, Any]:
        if self.weights is None:
            return {}
        return {WEIGHTS_KEY: {"fingerprint": self.weights.fingerprint, "samples_per_epoch": self._total}}

    def load_part(self, state: LoaderState) -> str:
        """Refuse a state planned with other weights or another epoch size, naming which."""
        if self.weights is None:
            return self.fingerprint
        part = state.part(WEIGHTS_KEY)
        if part is None:
            raise StateError(f"loader state: saved without sample weights, but this dataset has "
                             f"{self.weights.where}; resume it with a dataset made without sample_weights")
        if not isinstance(part, dict) or sorted(part) != ["fingerprint", "samples_per_epoch"]:
            raise StateError(f"loader state: '{WEIGHTS_KEY}' must be an object with keys "
                             f"['fingerprint', 'samples_per_epoch'], got {part!r:.200}")
        if part["fingerprint"] != self.weights.fingerprint:
            raise StateError(f"loader state: the sample weights changed since the state was saved: weights "
                             f"fingerprint {part['fingerprint']!r}, now {self.weights.fingerprint!r} "
                             f"({self.weights.where}); resume with the weights the epoch was planned with")
        if part["samples_per_epoch"] != self._total:
            raise StateError(f"loader state: samples_per_epoch was {part['samples_per_epoch']!r} when the "
                             f"state was saved, now {self._total}; resume with the same epoch size")
        return self.epoch_fingerprint(state.epoch)

    # ---- what travels to workers (nothing: the dataset is all there is) -------------------------
    def payload(self) -> dict[str, Any]:
        return {}

    def receive(self, payload: dict[str, Any]) -> bool:
        """A worker's iteration begins; whether its plans changed (never: one dataset is all there is)."""
        self.dataset = self.dataset.in_this_process()
        return False

    # ---- samples --------------------------------------------------------------------------------
    @property
    def repeats(self) -> bool:
        """Whether an epoch may hold a sample twice (a transform then gets a copy each, SW8)."""
        return self.weights is not None

    def needs_cache(self) -> bool:
        return self.dataset.store.worth_caching

    def read(self, plan: SamplePlan, consumer: int, start: int, cache: ShardCache | None, stats: WorkerStats,
             options: ReadOptions, batch_size: int) -> Iterator[WindowSamples]:
        """Consumer ``consumer``'s samples from ``start``, in plan order."""
        return iter_consumer(self.dataset, plan, consumer, start, cache, stats.read, options)

    # Keys only a mixture adds to a batch (``MixtureSource.decorate``): none here, so the batching
    # calls no hook per batch.
    decorate = None

    def new_tally(self) -> SourceTally | None:
        return None

    def prefetch_batches(self, num_workers: int, params: PlanParams) -> int | None:
        return None

    def shard_name(self, shard_index: int) -> str | None:
        shards = self.dataset.manifest.shards
        return shards[shard_index].name if 0 <= shard_index < len(shards) else None

    def sample(self, index: int) -> dict[str, Any]:
        """The stored sample at global ``index`` through range reads (not thread-safe)."""
        dataset = self.dataset.in_this_process()
        if self._lookup is None or self._lookup.dataset is not dataset:
            self.dataset = dataset
            self._lookup = RandomAccess(dataset)
        return self._lookup.sample(index)

    # ---- token documents (token blocks over this source) ---------------------------------------
    def for_tokens(self, field: str, apply_mix_now: bool = False) -> None:
        """Token blocks will cut this source's epochs (nothing to check for one dataset)."""

    def token_order(self) -> Any:
        """The one-consumer plan of the epoch's elements for token blocks: None for a plain
        dataset (the token index walks its shard order itself, TB25), the weighted plan else."""
        return None if self.weights is None else self.plan

    def token_lengths(self, field: str, epoch: int) -> np.ndarray:
        """Tokens per sample of ``field``, in the plan's numbering (manifest order; read once)."""
        if self._lengths is None:
            self._lengths = np.asarray(document_lengths(self.dataset, field), dtype=np.int64)
        return self._lengths

    def documents(self, order: Plan, fields: tuple[str, str | None], needs: list[tuple[int, int]],
                  cache: ShardCache | None, stats: WorkerStats) -> EpochDocuments:
        options = ReadOptions(read_ahead=False, views=True)  # column blocks as column views (TB12)
        return EpochDocuments(self.dataset, order, fields, needs, cache, stats.read, options)

    def slot_arrays(self, order: Plan, with_index: bool) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """Per document index, the per-slot keys a token batch adds (``_index``), and the source
        of each document for a mixture's tally (None: one source)."""
        return ({"_index": epoch_order(order)} if with_index else {}), None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lookup"] = None
        return state


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
