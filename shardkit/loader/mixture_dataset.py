"""``MixtureDataset``: a :class:`StreamingDataset` over a mixture of datasets (specs/mixture.md).

The plan of each epoch is the mixture plan (shardkit.plan.mixture_state): the partition,
equal steps, drop/pad, the consumed boundary and same-topology/elastic resume work exactly as
for one dataset. Batches may carry ``_source`` (int64, the source index of each sample, with
``with_source=True``). The loader state adds the mixture state (loader/mixture_state.py), so a
resume through ``ShardLoader`` is the plan layer's ``resume_mixture`` (MX8): the started epoch
finishes as it was planned, new weights or sources take effect at the next epoch, a changed
source is refused by name. ``sk.StreamingDataset(mixture_or_file, ...)`` makes one of these.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from shardkit.errors import StateError
from shardkit.loader.batcher import BatchCut
from shardkit.loader.dataset import StreamingDataset
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.mixture_state import SOURCES_KEY, BatchTallies, SourceTally, mixture_of, with_consumed
from shardkit.loader.topology import Topology
from shardkit.loader.transfer.arena import alloc_like
from shardkit.loader.transfer.ring import Ring
from shardkit.loader.weighted_dataset import separate_copies
from shardkit.plan import Plan, PlanParams, shard_offsets
from shardkit.plan.mixture_remix import EpochSource, remix, remix_description
from shardkit.plan.mixture_state import (
    APPLY,
    epoch_source,
    mixture_description,
    spec_after,
    spec_source,
)
from shardkit.plan.state import validate_state
from shardkit.read.mixture import Mixture, load_mixture, open_mixture
from shardkit.read.mixture_stream import iter_mixture_consumer
from shardkit.read.options import ReadOptions
from shardkit.read.stream import WindowSamples
from shardkit.storage import ShardCache

# Batches in flight by default (MX15), per worker and over all of them: ring slots grow with them
# (X5, specs/batch-transport.md), and a ring holds at most 4,096 slots.
MAX_PREFETCH_BATCHES, MAX_PREFETCH_TOTAL = 64, 1024
MAX_PREFETCH_BYTES = 256 << 20  # per worker: half a window of large samples (images) would be GBs


class MixtureDataset(StreamingDataset):
    """Batches of ``batch_size`` samples drawn from several datasets by weight, exactly once per
    element of each epoch's multiset. ``mixture``: a :class:`Mixture` or the path of a mixture
    file (.toml/.json). Keyword arguments as :class:`StreamingDataset`, plus ``with_source``."""

    def __init__(self, mixture: Mixture | str, *, batch_size: int, with_source: bool = False,
                 apply_mix: str = "next_epoch", storage_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if apply_mix not in APPLY:
            raise ValueError(f"apply_mix: expected one of {APPLY}, got {apply_mix!r}")
        self.apply_mix = apply_mix  # a loaded state's epoch under a new mix: finish as planned, or re-plan now
        self.mixture = load_mixture(mixture) if isinstance(mixture, str) else mixture
        self.opened = open_mixture(self.mixture, storage_options)
        self.spec = self.opened.spec()  # the mixture of every epoch but a started one
        self.with_source = with_source
        kwargs.setdefault("spread", 1)  # a mixture plan interleaves its sources itself (specs/mixture.md)
        # The parent holds the first source as ``dataset`` (its store, its fork handling).
        super().__init__(self.opened.datasets[0].url, batch_size=batch_size, storage_options=storage_options,
                         **kwargs)
        self._started: dict[str, Any] | None = None  # the loaded mixture state, without its plan
        self._saved: tuple[int, EpochSource, tuple[int, ...]] | None = None  # its epoch, source, source order
        self._bases: np.ndarray = self._sample_bases_of(range(len(self.spec.sources)))
        self._order: tuple[int, ...] = tuple(range(len(self.spec.sources)))
        self._lengths = self.opened.lengths  # per source, tokens of each sample (weights in tokens)

    @property
    def num_samples(self) -> int:
        """Samples in one epoch of the mixture (its multiset, MX1), not in any one source."""
        return self.spec.samples_per_epoch

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Refused: a mixture has no global sample numbering of its own; index a source's
        ``StreamingDataset`` instead (``batch["_source"]`` names the source)."""
        raise TypeError("a mixture has no random access by global index; open the source's StreamingDataset")

    @property
    def fingerprint(self) -> str:
        return self.spec.fingerprint()

    @property
    def _sample_bases(self) -> np.ndarray:  # first global sample of each source (mixture order)
        return self._sample_bases_of(range(len(self.spec.sources)))

    def _sample_bases_of(self, order: Any) -> np.ndarray:
        sizes = [self.opened.datasets[i].manifest.shard_sizes for i in order]
        flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in sizes] + [np.zeros(0, dtype=np.int64)])
        firsts = np.cumsum([0] + [len(s) for s in sizes])[:-1]
        return np.asarray(shard_offsets(flat)[firsts], dtype=np.int64)

    # ---- the mixture of an epoch --------------------------------------------------------------
    def source_for(self, epoch: int) -> EpochSource:
        """What ``epoch`` is planned from: the loaded state's own epoch (MX8, MX12) or the mixture's."""
        if self._saved is not None and self._saved[0] == epoch:
            return self._saved[1]
        return spec_source(self.spec, epoch)

    def _order_for(self, epoch: int) -> tuple[int, ...]:
        """Indices (in this mixture) of the plan's sources of ``epoch``, in plan order."""
        if self._saved is not None and self._saved[0] == epoch:
            return self._saved[2]
        return tuple(range(len(self.spec.sources)))

    def plan(self, epoch: int, world_size: int, num_workers: int, resume: dict[str, Any] | None = None) -> Plan:
        params: PlanParams = replace(self.params, epoch=epoch, world_size=world_size, num_workers=num_workers)
        key = repr((params, resume))
        plan = self._plans.get(key)
        if plan is None:
            started = self._started if self._started is not None and self._started["epoch"] == epoch else {}
            if resume is not None and "remix" in started and resume == started["remix"]["base"]["plan"]:
                resume = None  # the loaded epoch's rest was re-planned under a new mix: it starts afresh (MX12)
            plan = self.source_for(epoch).plan(params, resume)
            self._plans = {key: plan}
        return plan

    # ---- the loader state (loader/mixture_state.py) -----------------------------------------
    def state_fingerprint(self, epoch: int) -> str:
        return self.source_for(epoch).digest

    def state_part(self, epoch: int, resume: dict[str, Any] | None, received: np.ndarray) -> dict[str, Any]:
        """The ``mixture`` key of a loader state: ``received`` (per source of this mixture) plus,
        when the iteration resumed the loaded state, what that state had consumed."""
        order, n = list(self._order_for(epoch)), len(self.spec.sources)
        loaded = self._started is not None and self._started["epoch"] == epoch
        part = dict(self._started) if self._started is not None and loaded else mixture_description(self.spec, epoch)
        base, base_tokens = np.zeros(len(order), dtype=np.int64), np.zeros(len(order), dtype=np.int64)
        if self._started is not None and resume is not None and loaded:
            base = np.array([entry["consumed"] for entry in self._started["sources"]], dtype=np.int64)
            base_tokens = np.array([entry.get("consumed_tokens", 0) for entry in self._started["sources"]],
                                   dtype=np.int64)
        tokens = base_tokens + received[n:][order] if self._lengths is not None else None
        return {"mixture": with_consumed(part, base + received[:n][order], tokens)}

    def load_state_part(self, state: dict[str, Any]) -> str:
        """Apply a loader state's mixture part; returns the fingerprint its plan must carry."""
        if "tokens" in state and not self.yields_tokens:  # its offsets count blocks (TB15)
            raise StateError("loader state: saved by token blocks over a mixture (it has a 'tokens' key); resume "
                             "it with the same tokens=sk.TokenBlocks(...)")
        mixture_state = mixture_of(state)
        if mixture_state is None:  # a state saved before loader states carried the mixture
            return self.spec.fingerprint()
        if mixture_state.get("epoch") != state["epoch"]:
            raise StateError(f"loader state: epoch {state['epoch']} but its mixture part is for epoch "
                             f"{mixture_state.get('epoch')!r}")
        current = self.opened.spec()
        loaded = epoch_source(current, mixture_state)  # refuses a changed source by name (MX7)
        validate_state(mixture_state["plan"], loaded.digest)
        started = {k: v for k, v in mixture_state.items() if k != "plan"}
        epoch = int(mixture_state["epoch"])
        weights = dict(zip(current.names, current.weights(epoch), strict=True))
        if self.apply_mix == "now" and _changed(started, weights, current.composition):
            remixed = remix(loaded, mixture_state, current, weights, current.composition)
            started = remix_description(remixed, mixture_state, weights, current.composition)
        self._apply(started)
        return loaded.digest  # the loaded plan's fingerprint (a re-planned rest gets its own)

    def _apply(self, started: dict[str, Any]) -> None:
        base = self.opened.spec()
        try:
            source = epoch_source(base, {**started, "plan": None})
        except (KeyError, TypeError) as exc:
            raise StateError(f"mixture state: malformed ({exc})") from None
        index = {name: i for i, name in enumerate(base.names)}
        self._saved = (int(started["epoch"]), source, tuple(index[s.name] for s in source.sources))
        self.spec = spec_after(base, started)
        self._started, self._plans = started, {}

    def prefetch_batches(self, num_workers: int) -> int | None:
        """MX15: a consumer's range starts inside a window of the mixed sequence, so each worker
        decodes its windows at its own steps and the in-order loader waits out each one in turn;
        half a window of batches in flight per worker lets it take the others' batches meanwhile."""
        if not self.params.shuffle:
            return None
        batch = self.params.batch_size
        cap = min(MAX_PREFETCH_BATCHES, MAX_PREFETCH_TOTAL // max(num_workers, 1),
                  MAX_PREFETCH_BYTES // max(batch * self._sample_bytes(), 1))
        return min(self.params.shuffle_window // (2 * batch), cap)

    def _sample_bytes(self) -> int:
        """Decoded bytes of an average sample of the source whose samples are largest."""
        manifests = [ds.manifest for ds in self.opened.datasets]
        return max((m.raw_bytes // m.num_samples for m in manifests if m.num_samples), default=0)

    def new_tally(self) -> SourceTally:
        return SourceTally(self.spec.names, tokens=self._lengths is not None)

    # ---- workers: the loaded mixture travels in the control block (L6) ------------------------
    def publish(self, topology: Topology, resume: dict[str, Any] | None, generation: int,
                ring: Ring | None = None, group: int = 1) -> None:
        super().publish(topology, resume, generation, ring, group)
        payload = self.control.read() or {}
        self.control.write({**payload, "mixture": self._started})

    def __iter__(self) -> Iterator[Any]:
        started = (self.control.read() or {}).get("mixture")
        if started is not None and started != self._started:  # a persistent worker's old copy
            self._apply(started)
        return super().__iter__()

    # ---- reading -------------------------------------------------------------------------------
    def _shard_cache(self) -> ShardCache | None:
        if self.options.cache_dir is None or not any(ds.store.worth_caching for ds in self.opened.datasets):
            return None
        if self._cache is None:
            self._cache = ShardCache(self.options.cache_dir, self.options.cache_limit)
        return self._cache

    def _read_consumer(self, plan: Plan, consumer: int, start: int, cache: ShardCache | None,
                       stats: WorkerStats, options: ReadOptions) -> Iterator[WindowSamples]:
        self._order = self._order_for(plan.params.epoch)
        self._bases = self._sample_bases_of(self._order)
        self._reordered = self._order != tuple(range(len(self._order)))
        order = np.asarray(self._order, dtype=np.int64) if self._reordered else None
        self._tallies = BatchTallies(self._bases[1:], order, len(self.spec.sources), self.params.batch_size,
                                     self._lengths)
        windows = _tallied(iter_mixture_consumer(self.opened, plan, consumer, start, cache, stats.read, options,
                                                 self._order), self._tallies)
        weighted = self.transform is not None and any(w is not None for w in self.opened.weights or ())
        return map(separate_copies, windows) if weighted else windows  # each copy its own dict (MX17, SW8)

    def _collate(self, cut: BatchCut) -> Any:
        batch = super()._collate(cut)
        counts = self._tallies.take()  # this batch's, taken whatever collate_fn made of it
        if isinstance(batch, dict):
            reindex = self.options.with_index and self._reordered
            if self.with_source or reindex:
                in_plan = np.searchsorted(self._bases[1:], cut.indices, side="right")
                sources = np.asarray(self._order, dtype=np.int64)[in_plan] if self._reordered else in_plan
                if reindex:
                    # a resumed epoch's plan lists its sources in the saved order: _index is this mixture's
                    index = cut.indices - self._bases[in_plan] + self._sample_bases[sources]
                    batch["_index"] = alloc_like(index, torch.int64)
                if self.with_source:
                    batch["_source"] = alloc_like(sources, torch.int64)
            # exact ints beside the tensors (X9), counted a window at a time as the reader yielded them
            batch[SOURCES_KEY] = counts
        return batch


def _tallied(windows: Iterator[WindowSamples], tallies: BatchTallies) -> Iterator[WindowSamples]:
    for window in windows:
        tallies.add(window.indices, window.padded)
        yield window


def _changed(started: dict[str, Any], weights: dict[str, float], composition: str) -> bool:
    """Whether ``weights`` (by name) or ``composition`` differ from the loaded epoch's."""
    before = {entry["name"]: float(entry["weight"]) for entry in started["sources"]}
    names = set(before) | set(weights)
    return composition != started["composition"] or any(before.get(n, 0.0) != weights.get(n, 0.0) for n in names)
