"""The epoch source of a mixture of datasets (specs/mixture.md).

The plan of each epoch is the mixture plan (shardkit.plan.mixture.state): the partition, equal
steps, drop/pad, the consumed boundary and same-topology/elastic resume work exactly as for one
dataset. Batches may carry ``_source`` (int64, the source index of each sample, with
``with_source=True``). The loader state adds the mixture state (loader/mixture_state.py), so a
resume through ``ShardLoader`` is the plan layer's ``resume_mixture`` (MX8): the started epoch
finishes as it was planned, new weights or sources take effect at the next epoch (or now, with
``apply_mix="now"``, MX12), a changed source is refused by name. Token blocks over a mixture cut
its epoch documents (TB15-TB17, MX14) through the same source.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from shardkit.errors import StateError
from shardkit.loader.batcher import BatchCut
from shardkit.loader.loader_state import LoaderState
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.mixture_state import SOURCES_KEY, BatchTallies, SourceTally, mixture_of, with_consumed
from shardkit.loader.transfer.arena import alloc_like
from shardkit.plan import Plan, PlanParams, shard_offsets
from shardkit.plan.any_state import SamplePlan, validate_any_state
from shardkit.plan.global_order.state import build_global_plan
from shardkit.plan.mixture.remix import EpochSource, remix, remix_description
from shardkit.plan.mixture.state import APPLY, epoch_source, mixture_description, spec_after, spec_source
from shardkit.plan.mixture.state_check import MIX_STATE_VERSION
from shardkit.plan.tokens.plan import epoch_order
from shardkit.read import StoredDataset
from shardkit.read.mixture.config import Mixture, OpenMixture, source_lengths
from shardkit.read.mixture.stream import iter_mixture_consumer, source_of_indices
from shardkit.read.options import ReadOptions
from shardkit.read.stream import WindowSamples
from shardkit.read.tokens.docs import EpochDocuments
from shardkit.read.tokens.mixture_docs import MixtureDocuments
from shardkit.storage import ShardCache

MIXTURE_KEY = "mixture"
# Batches in flight by default (MX15), per worker and over all of them: ring slots grow with them
# (X5, specs/batch-transport.md), and a ring holds at most 4,096 slots.
MAX_PREFETCH_BATCHES, MAX_PREFETCH_TOTAL = 64, 1024
MAX_PREFETCH_BYTES = 256 << 20  # per worker: half a window of large samples (images) would be GBs


class MixtureSource:
    """Several datasets drawn from by weight, exactly once per element of each epoch's multiset."""

    def __init__(self, mixture: Mixture, opened: OpenMixture, with_source: bool = False,
                 apply_mix: str = "next_epoch") -> None:
        if apply_mix not in APPLY:
            raise ValueError(f"apply_mix: expected one of {APPLY}, got {apply_mix!r}")
        self.mixture, self.opened = mixture, opened
        self.apply_mix = apply_mix  # a loaded state's epoch under a new mix: finish as planned, or re-plan now
        self.with_source = with_source
        self.spec = opened.spec()  # the mixture of every epoch but a started one
        self._started: dict[str, Any] | None = None  # the loaded mixture state, without its plan
        self._saved: tuple[int, EpochSource, tuple[int, ...]] | None = None  # its epoch, source, source order
        self._lengths = opened.lengths  # per source, tokens of each sample (weights in tokens, MX13)
        self._tokens = False  # cut into token blocks: the state counts tokens too (MX14)
        self._tallies: BatchTallies | None = None  # this consumer's (in the worker)
        self._order: tuple[int, ...] = tuple(range(len(self.spec.sources)))
        self._reordered = False  # _order is not the mixture's own (set with it in read())
        self._bases = self._sample_bases_of(self._order)

    # ---- the epoch ------------------------------------------------------------------------------
    @property
    def samples_per_epoch(self) -> int:
        """Elements of one epoch of the mixture (its multiset, MX1), not of any one source."""
        return self.spec.samples_per_epoch

    num_samples = samples_per_epoch

    @property
    def fingerprint(self) -> str:
        return self.spec.fingerprint()

    @property
    def datasets(self) -> tuple[StoredDataset, ...]:
        return tuple(self.opened.datasets)

    def epoch_fingerprint(self, epoch: int) -> str:
        return self.source_for(epoch).digest

    def source_for(self, epoch: int) -> EpochSource:
        """What ``epoch`` is planned from: the loaded state's own epoch (MX8, MX12) or the mixture's."""
        if self._saved is not None and self._saved[0] == epoch:
            return self._saved[1]
        return spec_source(self.spec, epoch)

    def order_for(self, epoch: int) -> tuple[int, ...]:
        """Indices (in this mixture) of the plan's sources of ``epoch``, in plan order."""
        if self._saved is not None and self._saved[0] == epoch:
            return self._saved[2]
        return tuple(range(len(self.spec.sources)))

    def plan(self, params: PlanParams, resume: dict[str, Any] | None = None, group: int = 1) -> SamplePlan:
        """The mixture plan of the epoch; in global order its one-process mixed sequence cut
        into global batches (P29, P35)."""
        started = self._started if self._started is not None and self._started["epoch"] == params.epoch else {}
        if resume is not None and "remix" in started and resume == started["remix"]["base"]["plan"]:
            resume = None  # the loaded epoch's rest was re-planned under a new mix: it starts afresh (MX12)
        source = self.source_for(params.epoch)
        if params.order == "global":
            return build_global_plan(source.shard_sizes, params, resume, group, source.sequence)
        return source.plan(params, resume)

    def shard_sizes(self, epoch: int) -> np.ndarray:
        return self.source_for(epoch).shard_sizes

    def warn_quality(self, plan: Plan) -> None:
        """P20 measures one dataset's shard mixing; a mixture plan interleaves its sources itself."""

    @property
    def _sample_bases(self) -> np.ndarray:  # first global sample of each source (mixture order)
        return self._sample_bases_of(range(len(self.spec.sources)))

    def _sample_bases_of(self, order: Any) -> np.ndarray:
        sizes = [self.opened.datasets[i].manifest.shard_sizes for i in order]
        flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in sizes] + [np.zeros(0, dtype=np.int64)])
        firsts = np.cumsum([0] + [len(s) for s in sizes])[:-1]
        return np.asarray(shard_offsets(flat)[firsts], dtype=np.int64)

    # ---- the loader state (loader/mixture_state.py) -----------------------------------------
    @property
    def part_keys(self) -> frozenset[str]:
        return frozenset({MIXTURE_KEY})

    def state_part(self, epoch: int, resume: dict[str, Any] | None, received: np.ndarray | None) -> dict[str, Any]:
        """The ``mixture`` key of a loader state: ``received`` (per source of this mixture) plus,
        when the iteration resumed the loaded state, what that state had consumed."""
        order, n = list(self.order_for(epoch)), len(self.spec.sources)
        counts = np.zeros(2 * n, dtype=np.int64) if received is None else received
        loaded = self._started is not None and self._started["epoch"] == epoch
        part = dict(self._started) if self._started is not None and loaded else mixture_description(self.spec, epoch)
        base, base_tokens = np.zeros(len(order), dtype=np.int64), np.zeros(len(order), dtype=np.int64)
        if self._started is not None and resume is not None and loaded:
            base = np.array([entry["consumed"] for entry in self._started["sources"]], dtype=np.int64)
            base_tokens = np.array([entry.get("consumed_tokens", 0) for entry in self._started["sources"]],
                                   dtype=np.int64)
        tokens = base_tokens + counts[n:][order] if self._lengths is not None else None
        part = with_consumed(part, base + counts[:n][order], tokens)
        return {MIXTURE_KEY: {**part, "version": MIX_STATE_VERSION} if self._tokens else part}

    def load_part(self, state: LoaderState) -> str:
        """Apply a loader state's mixture part; returns the fingerprint its plan must carry."""
        mixture_state = mixture_of(state.part(MIXTURE_KEY), state.plan)
        if mixture_state is None:  # a state saved before loader states carried the mixture
            if self._tokens:
                raise StateError("loader state: not saved by a token mixture (it needs both a 'mixture' and a "
                                 "'tokens' part); resume it with the dataset that saved it")
            return self.spec.fingerprint()
        if mixture_state.get("epoch") != state.epoch:
            raise StateError(f"loader state: epoch {state.epoch} but its mixture part is for epoch "
                             f"{mixture_state.get('epoch')!r}")
        current = self.opened.spec()
        loaded = epoch_source(current, mixture_state)  # refuses a changed source by name (MX7)
        validate_any_state(mixture_state["plan"], loaded.digest)
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
        self._started = started

    # ---- workers: the loaded mixture travels in the control block (L6) ------------------------
    def payload(self) -> dict[str, Any]:
        return {MIXTURE_KEY: self._started}

    def receive(self, payload: dict[str, Any]) -> bool:
        """A worker's iteration begins with the loaded mixture state; whether its plans changed.
        Its datasets get stores usable in this process once, not once per stream (after a fork)."""
        self.opened.datasets = tuple(ds.in_this_process() for ds in self.opened.datasets)
        started = payload.get(MIXTURE_KEY)
        if started is None or started == self._started:
            return False
        self._apply(started)  # a persistent worker's old copy
        return True

    # ---- samples --------------------------------------------------------------------------------
    @property
    def repeats(self) -> bool:
        return any(w is not None for w in self.opened.weights or ())  # each copy its own dict (MX17, SW8)

    def needs_cache(self) -> bool:
        return any(ds.store.worth_caching for ds in self.opened.datasets)

    def read(self, plan: SamplePlan, consumer: int, start: int, cache: ShardCache | None, stats: WorkerStats,
             options: ReadOptions, batch_size: int) -> Iterator[WindowSamples]:
        self._order = self.order_for(plan.params.epoch)
        self._bases = self._sample_bases_of(self._order)
        self._reordered = reordered = self._order != tuple(range(len(self._order)))
        order = np.asarray(self._order, dtype=np.int64) if reordered else None
        tallies = self._tallies = BatchTallies(self._bases[1:], order, len(self.spec.sources), batch_size,
                                               self._lengths)
        for window in iter_mixture_consumer(self.opened, plan, consumer, start, cache, stats.read, options,
                                            self._order):
            tallies.add(window.indices, window.padded)
            yield window
            del window  # not held while the next window is read (RP10)

    def decorate(self, batch: Any, cut: BatchCut, with_index: bool) -> None:
        """``_source``, ``_index`` in this mixture's numbering, and the per-source counts (X9)."""
        if self._tallies is None:
            raise RuntimeError(f"mixture {self.spec.names}: a batch was collated before its consumer's samples "
                               f"were read (decorate() before read())")
        counts = self._tallies.take()  # this batch's, taken whatever collate_fn made of it
        if not isinstance(batch, dict):
            return
        reordered = self._reordered
        reindex = with_index and reordered
        if self.with_source or reindex:
            in_plan = np.searchsorted(self._bases[1:], cut.indices, side="right")
            sources = np.asarray(self._order, dtype=np.int64)[in_plan] if reordered else in_plan
            if reindex:  # a resumed epoch's plan lists its sources in the saved order: _index is this mixture's
                index = cut.indices - self._bases[in_plan] + self._sample_bases[sources]
                batch["_index"] = alloc_like(index, torch.int64)
            if self.with_source:
                batch["_source"] = alloc_like(sources, torch.int64)
        batch[SOURCES_KEY] = counts  # exact ints beside the tensors (X9)

    def new_tally(self) -> SourceTally:
        return SourceTally(self.spec.names, tokens=self._lengths is not None)

    def prefetch_batches(self, num_workers: int, params: PlanParams) -> int | None:
        """MX15: a consumer's range starts inside a window of the mixed sequence, so each worker
        decodes its windows at its own steps and the in-order loader waits out each one in turn;
        half a window of batches in flight per worker lets it take the others' batches meanwhile."""
        if not params.shuffle:
            return None
        batch = params.batch_size
        cap = min(MAX_PREFETCH_BATCHES, MAX_PREFETCH_TOTAL // max(num_workers, 1),
                  MAX_PREFETCH_BYTES // max(batch * self._sample_bytes(), 1))
        return min(params.shuffle_window // (2 * batch), cap)

    def _sample_bytes(self) -> int:
        """Decoded bytes of an average sample of the source whose samples are largest."""
        manifests = [ds.manifest for ds in self.opened.datasets]
        return max((m.raw_bytes // m.num_samples for m in manifests if m.num_samples), default=0)

    def shard_name(self, shard_index: int) -> str | None:
        return None  # a mixture plan's shard indices are over all its sources

    def sample(self, index: int) -> dict[str, Any]:
        raise TypeError("a mixture has no random access by global index; open the source's StreamingDataset")

    # ---- token documents: the mixed sequence of one consumer is the epoch order (TB15) ----------
    def for_tokens(self, field: str, apply_mix_now: bool = False) -> None:
        """Token blocks will cut this mixture's epoch documents (MX14)."""
        if self.apply_mix != "next_epoch":
            raise ValueError("apply_mix='now' is not supported with tokens=: a new mix for the rest of a started "
                             "epoch would change its document order; new weights take effect at the next epoch")
        if self.mixture.weight_unit == "tokens" and self.mixture.token_field != field:
            raise ValueError(f"mixture token_field {self.mixture.token_field!r} is not the blocks' field "
                             f"{field!r}: weights in tokens must count the tokens the blocks cut")
        if self._lengths is None:  # weights in samples: read each source's lengths here (TB6)
            self._lengths = tuple(source_lengths(source, dataset, field)
                                  for source, dataset in zip(self.mixture.sources, self.opened.datasets, strict=True))
        self._tokens = True

    def token_order(self) -> Any:
        """The one-consumer plan of the epoch's documents: the mixed sequence (TB15)."""
        return self.plan

    def token_lengths(self, field: str, epoch: int) -> np.ndarray:
        """Tokens per sample in the plan's numbering of ``epoch`` (its sources one after another)."""
        if self._lengths is None:
            raise RuntimeError(f"mixture {self.spec.names}: token lengths asked for before the mixture was made "
                               f"for token blocks (token_lengths() before for_tokens())")
        parts = [np.asarray(self._lengths[i], dtype=np.int64) for i in self.order_for(epoch)]
        return np.concatenate(parts + [np.zeros(0, dtype=np.int64)])

    def documents(self, order: Plan, fields: tuple[str, str | None], needs: list[tuple[int, int]],
                  cache: ShardCache | None, stats: WorkerStats) -> EpochDocuments:
        return MixtureDocuments(self.opened, self.order_for(order.params.epoch), order, fields, needs, cache,
                                stats.read, ReadOptions(read_ahead=False))

    def slot_arrays(self, order: Plan, with_index: bool) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Per document index: ``_source`` (with ``with_source``), ``_index`` in this mixture's
        numbering (with ``with_index``), and every document's source for the tally."""
        plan_order = self.order_for(order.params.epoch)
        bases = self._sample_bases_of(plan_order)
        found = epoch_order(order)
        in_plan = source_of_indices(bases, found)
        sources = np.asarray(plan_order, dtype=np.int64)[in_plan]
        slots = {"_source": sources} if self.with_source else {}
        if with_index:
            slots["_index"] = found - bases[in_plan] + self._sample_bases[sources]
        return slots, sources

    def block_tally(self, doc: np.ndarray, offset: np.ndarray, sources: np.ndarray) -> tuple[int, ...]:
        """Per source: documents started in a token batch (position 0 received), then positions."""
        doc, offset = doc.reshape(-1), offset.reshape(-1)
        real = doc >= 0
        of_slot = sources[doc[real]]
        n = len(self.spec.sources)
        started = np.bincount(of_slot[offset[real] == 0], minlength=n)
        return tuple(np.concatenate([started, np.bincount(of_slot, minlength=n)]).astype(np.int64).tolist())


def _changed(started: dict[str, Any], weights: dict[str, float], composition: str) -> bool:
    """Whether ``weights`` (by name) or ``composition`` differ from the loaded epoch's."""
    before = {entry["name"]: float(entry["weight"]) for entry in started["sources"]}
    names = set(before) | set(weights)
    return composition != started["composition"] or any(before.get(n, 0.0) != weights.get(n, 0.0) for n in names)
