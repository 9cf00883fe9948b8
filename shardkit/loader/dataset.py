"""``StreamingDataset``: an IterableDataset that yields whole batches of one global consumer.

One class for every kind of dataset: it composes an **epoch source** (one dataset, a weighted
dataset, a mixture: ``loader/dataset_source.py``, ``loader/mixture_source.py``) and a
**batching** (samples, token blocks: ``loader/sample_batching.py``, ``loader/token_batching.py``),
chosen from the keywords by ``loader/compose.py`` (specs/partition.md §Components). Each
``__iter__`` (in a DataLoader worker, or in the training process when ``num_workers=0``) reads
the epoch, topology and resume state from the loader's control block, builds the pure plan
(shardkit.plan) and streams consumer ``rank × W + worker``'s batches (G2, G3 in
docs/guarantees.md). Every dict batch carries ``_shardkit`` = a ``BatchMeta`` (consumer, end
position, epoch as ints) so the training process can record what it actually received (G5);
``ShardLoader`` strips it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from shardkit.errors import StateError
from shardkit.loader.compose import Choices, as_mixture, batching, check_choices, epoch_source
from shardkit.loader.dataset_source import DatasetSource
from shardkit.loader.emitter import consumer_emitter, consumer_topology, payload_group
from shardkit.loader.env import offline_setting
from shardkit.loader.epoch_check import check_dataset
from shardkit.loader.guard import check_caller
from shardkit.loader.loader_state import BASE_KEYS, LoaderState
from shardkit.loader.mixture_source import MixtureSource
from shardkit.loader.mixture_state import SourceTally
from shardkit.loader.sample_batching import SampleBatching
from shardkit.loader.step_plans import StepPlans
from shardkit.loader.stream_options import StreamOptions, stream_options
from shardkit.loader.token_agree import count_share
from shardkit.loader.token_batching import TokenBatching
from shardkit.loader.topology import Topology, rank_and_world
from shardkit.loader.transfer.control import Control
from shardkit.loader.transfer.meta import META_KEY
from shardkit.loader.transfer.packed import in_groups
from shardkit.loader.transfer.ring import Ring
from shardkit.loader.transforms import Transform
from shardkit.plan import Plan, PlanParams
from shardkit.plan.any_state import SamplePlan, check_state_order
from shardkit.plan.global_order.order import GlobalOrderPlan
from shardkit.plan.params import default_spread
from shardkit.plan.rotation import StepPlan
from shardkit.plan.tokens.config import TokenBlocks
from shardkit.plan.tokens.pack_count import CountShare
from shardkit.read import StoredDataset
from shardkit.read.mixture.config import Mixture
from shardkit.storage import ShardCache

__all__ = ["META_KEY", "StreamOptions", "StreamingDataset"]
PART_HINTS = {  # what a state's part says about the dataset that saved it (refused by name)
    "sample_weights": "saved with sample weights; resume it with the same sample_weights= (SW7)",
    "tokens": "saved by a token-block dataset; resume it with the same tokens=sk.TokenBlocks(...)",
    "mixture": "saved by a mixture; resume it with the mixture (sk.StreamingDataset(mixture))",
}


class StreamingDataset(IterableDataset):  # type: ignore[type-arg,unused-ignore]
    """Batches of ``batch_size`` samples (or token blocks) from a shardkit dataset or a mixture,
    exactly once per epoch.

    ``path``: a dataset folder or URL, a ``Mixture``, or a mixture file (.toml/.json;
    specs/mixture.md): each source drawn from by weight; ``with_source=True`` adds ``_source``
    per sample, ``apply_mix`` says when a resumed epoch takes a new mix (``"next_epoch"``, or
    ``"now"``: MX12). ``sample_weights=`` (a numeric field or one weight per sample) and
    ``samples_per_epoch=`` make each epoch a weighted multiset (specs/sample-weights.md).
    ``tokens=sk.TokenBlocks(seq_len, ...)``: batches of ``batch_size`` fixed-length token blocks
    instead of samples, over any of those (specs/token-blocks.md).
    ``transform`` maps one sample dict (in the worker, before collation) — ``transform(sample)``,
    or ``transform(sample, ctx)`` with a ``SampleContext`` (global index, epoch, seed; decided
    from the signature once: loader/transforms.py); ``collate_fn`` maps a list of samples to a
    batch (default: ``collate_samples``). Both must be picklable for spawn-started workers. Rank
    and world size are the default group's, read at ``__iter__``, unless ``data_parallel=`` (an
    ``sk.DataParallel``, ``ProcessGroup``, ``DeviceMesh`` or ``(rank, size)``) names the
    data-parallel group, resolved here once (specs/partition.md P22-P26).
    ``spread``: when shuffling, each shard is split among about this many consumers, so a window
    mixes that many times more shards; by default 12 for a dataset not shuffled at pack time and
    1 for one that was, and for a mixture (specs/partition.md P18-P19).
    ``order="global"``: every step's global batch (``world_size × batch_size`` samples) is the
    same on any number of ranks and workers, resumable across them (P27-P35; opt-in: it reads
    more sparsely, P32); with ``tokens=`` (concat mode) the global batch is ``world_size ×
    batch_size`` blocks of one token stream (specs/token-blocks.md TB30-TB34).
    ``quality_field``: a label field whose distinct values per local batch the training process
    measures against a uniform shuffle's when it plans the first epoch, as ``shardkit plan
    --quality FIELD`` does (one read of every sample's field), logging once when poor (P20).
    ``cache_dir``: the node cache of a remote dataset; by default ``$SHARDKIT_CACHE_DIR``, else
    ``~/.cache/shardkit`` (where ``shardkit cache warm`` puts it); ``False``: none, range reads
    (specs/cache.md K47). ``offline``: when the store cannot be reached, which cached manifest
    may stand in for it (K48): ``"sealed"`` (default, ``$SHARDKIT_OFFLINE``): one this user
    downloaded and nobody can have written since; ``"trust-cache"``: any copy in the cache dir,
    so every user who can write that dir can choose the samples this job trains on;
    ``"never"``: fail with the store.
    """

    def __init__(
        self,
        path: str | Mixture,
        *,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        tail: str = "drop",
        shuffle_window: int = 8192,
        interleave: int = 1,
        spread: int | None = None,
        order: str = "shard",
        with_index: bool = False,
        cache_dir: str | bool | None = None,  # None: $SHARDKIT_CACHE_DIR or ~/.cache/shardkit; False: none
        cache_limit: int | str | None = None,  # None: $SHARDKIT_CACHE_LIMIT or 200GiB (loader/env.py)
        storage_options: dict[str, Any] | None = None,
        transform: Transform | None = None,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        tokens: TokenBlocks | None = None,
        sample_weights: str | np.ndarray | Sequence[float] | None = None,
        samples_per_epoch: int | None = None,
        with_source: bool = False,
        apply_mix: str = "next_epoch",
        quality_field: str | None = None,
        data_parallel: Any = None,
        offline: str | None = None,
    ) -> None:
        mixture = as_mixture(path)
        choices = Choices(tokens, sample_weights, samples_per_epoch, with_source, apply_mix, transform,
                          collate_fn, quality_field, order)
        check_choices(mixture, choices)
        self.path = path if isinstance(path, str) else "<mixture>"
        self.params = PlanParams(seed=seed, batch_size=batch_size, tail=tail, shuffle=shuffle,
                                 shuffle_window=shuffle_window, interleave=interleave, order=order)
        urls = [s.path for s in mixture.sources] if mixture is not None else [self.path]
        self.options = stream_options(urls, with_index, cache_dir, cache_limit, storage_options, data_parallel)
        # The node cache also holds the manifest: one download per node, not per rank (K18). Its
        # own instance: the shard cache (and its counters, G10) is made where shards are read.
        cache_dir, limit = self.options.cache_dir, self.options.cache_limit
        manifest_cache = ShardCache(cache_dir, limit) if cache_dir and self.options.remote else None
        self.source: DatasetSource | MixtureSource = epoch_source(
            self.path, mixture, choices, storage_options, manifest_cache, offline_setting(offline))
        self.batching: SampleBatching | TokenBatching = batching(choices, self.path)
        if order == "global":  # one sequence, not one per consumer: spread does not apply (P29)
            spread = 1
        elif spread is None:  # P19: spread only what was not shuffled at pack time; a mixture interleaves itself
            spread = default_spread(self.dataset.manifest.order) if mixture is None else 1
        self.params = replace(self.params, spread=spread)
        if tokens is None:  # a batch of token blocks may come from fewer documents
            check_dataset(self.source.samples_per_epoch, self.params)  # fewer elements than a batch (P16)
        else:
            self.source.for_tokens(tokens.field)
        self.control = Control()
        self._epoch = 0
        self._cache: ShardCache | None = None
        self._plans = StepPlans()  # the plans built, by what fixes them (loader/step_plans.py)

    # ---- what it is made of -------------------------------------------------------------------
    @property
    def dataset(self) -> StoredDataset:
        """The dataset read (a mixture's first source)."""
        return self.source.datasets[0]

    @property
    def mixture(self) -> Mixture | None:
        """The mixture read, or None for one dataset."""
        return self.source.mixture

    @property
    def tokens(self) -> TokenBlocks | None:
        """The token blocks cut, or None for batches of samples."""
        return self.batching.tokens if isinstance(self.batching, TokenBatching) else None

    @property
    def yields_tokens(self) -> bool:
        """Whether batches are token blocks carrying ``num_tokens``/``num_padding`` (TB9)."""
        return self.batching.yields_tokens

    @property
    def fingerprint(self) -> str:
        return self.source.fingerprint

    # ---- configuration from the training process ------------------------------------------
    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next iteration; reaches persistent workers (G4)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self._epoch = epoch

    def publish(self, topology: Topology, resume: dict[str, Any] | None, generation: int,
                ring: Ring | None = None, group: int = 1) -> None:
        """Write what the next iteration's workers need into the control block; ``group``:
        batches a worker sends as one DataLoader item (X8, specs/batch-transport.md)."""
        self.control.write({"epoch": self._epoch, "rank": topology.rank, "world_size": topology.world_size,
                            "resume": resume, "generation": generation, "group": group,
                            "ring": list(ring.key) if ring is not None else None,
                            **self.source.payload(), **self.batching.payload()})

    def prefetch_batches(self, num_workers: int) -> int | None:
        """Batches each worker keeps in flight when ``ShardLoader`` is given no ``prefetch_factor``
        (None: the loader's default; a mixture asks for more, MX15; token blocks, TB19)."""
        wanted = self.source.prefetch_batches(num_workers, self.params)
        return wanted if wanted is not None else self.batching.prefetch_batches(num_workers, self.params)

    def transfer_batches(self) -> int | None:
        """Batches per DataLoader item when ``ShardLoader`` is given no ``batches_per_transfer``
        (None: the loader's default, X8; token blocks send more, their batches being cheap to make)."""
        return self.batching.transfer_batches()

    def new_tally(self) -> SourceTally | None:
        """What counts received elements per source at the consumed boundary (mixtures only)."""
        return self.source.new_tally()

    # ---- plans ----------------------------------------------------------------------------------
    def step_plan(self, epoch: int, world_size: int, num_workers: int,
                  resume: dict[str, Any] | None = None, group: int = 1, collective: bool = False) -> StepPlan:
        """The (cached) plan ``ShardLoader`` counts steps and consumed offsets with, for a topology;
        ``resume`` = a plan state (G6). Offsets count samples, or blocks for token blocks.
        ``group``: batches per DataLoader item (X8), which deal global order's batches (P30).
        ``collective``: every rank calls it here at once (``iter(loader)``), so a pack plan's
        count may be shared among ranks (one all-reduce, TB29)."""
        params = replace(self.params, epoch=epoch, world_size=world_size, num_workers=num_workers)
        share = self._count_share(params) if collective else None
        return self._plans.get(self.batching, self.source, params, resume, group, share)

    def _count_share(self, params: PlanParams) -> CountShare | None:
        """This rank's share of a pack plan's count, when ranks share it (TB29)."""
        if not isinstance(self.batching, TokenBatching) or self.batching.tokens.mode != "pack":
            return None
        return count_share(params, rank_and_world(self.options.rank, self.options.world_size)[0])

    def plan(self, epoch: int, world_size: int, num_workers: int, resume: dict[str, Any] | None = None,
             group: int = 1) -> SamplePlan:
        """The sample plan of ``epoch`` (batches of samples only; token blocks: ``step_plan``);
        a ``GlobalOrderPlan`` in ``order="global"``."""
        if self.yields_tokens:
            raise TypeError("a token-block dataset has no sample plan; use step_plan")
        plan = self.step_plan(epoch, world_size, num_workers, resume, group)
        if not isinstance(plan, Plan | GlobalOrderPlan):
            raise TypeError(f"StreamingDataset({self.path!r}): its batching planned a {type(plan).__name__}, "
                            f"not a sample plan")
        return plan

    def num_batches(self, epoch: int, rank: int, world_size: int, num_workers: int,
                    resume: dict[str, Any] | None = None, group: int = 1) -> int:
        """Batches rank ``rank`` still yields this epoch (all ranks get the same number)."""
        plan = self.step_plan(epoch, world_size, num_workers, resume, group)
        batch = self.params.batch_size
        width = max(num_workers, 1)
        consumers = range(rank * width, (rank + 1) * width)
        return sum(plan.num_batches(c) - plan.start_offsets[c] // batch for c in consumers)

    # ---- its parts of a loader state (each component checks its own) --------------------------
    def state_fingerprint(self, epoch: int) -> str:
        """The fingerprint the loader state's plan of ``epoch`` carries."""
        return self.source.epoch_fingerprint(epoch)

    def state_part(self, epoch: int, resume: dict[str, Any] | None, received: np.ndarray | None) -> dict[str, Any]:
        """The keys a loader state adds for the source and the batching at ``offsets``."""
        return self.source.state_part(epoch, resume, received)

    def plan_state(self, plan: Any, offsets: list[int], epoch: int, rank: int | None = None) -> dict[str, Any]:
        """The loader state's ``plan``: ``plan`` (from ``step_plan``) after ``offsets``; ``rank``:
        only that rank's offsets are known (its own unfinished iteration, R10)."""
        return self.batching.plan_state(plan, offsets, self.state_fingerprint(epoch), rank)

    def extra_state(self, plan: Any, offsets: list[int], known: dict[int, Any] | None = None) -> dict[str, Any]:
        """The batching's keys of a loader state at ``offsets`` (token blocks: ``tokens``; ``known``:
        the cutter states consumers reported there, TB28)."""
        if known is None:
            return self.batching.state_part(plan, offsets)
        return self.batching.state_part(plan, offsets, known)  # type: ignore[call-arg]

    def load_state_part(self, state: LoaderState) -> str:
        """Check and apply the components' parts of a loader state (an unknown part is refused by
        name); returns the fingerprint its plan must carry."""
        known = BASE_KEYS | self.source.part_keys | self.batching.part_keys
        for key in sorted(set(state.parts) - known):
            hint = PART_HINTS.get(key, "saved by another kind of dataset or a newer shardkit")
            raise StateError(f"loader state: it has a {key!r} part this dataset does not read ({hint})")
        check_state_order(state.plan, self.params.order, "loader state")  # R17: naming both orders
        self._plans.clear()
        fingerprint = self.source.load_part(state)
        self.batching.load_part(state, self.source)
        return fingerprint

    # ---- sizes and random access: sizes count samples; len(ShardLoader) counts steps (R12) ----
    @property
    def num_samples(self) -> int:
        """Samples in the dataset (every shard), whatever the topology; a mixture: in one epoch."""
        return self.source.num_samples

    def __len__(self) -> int:
        """Samples this rank yields in one whole epoch: its steps × ``batch_size`` (pads
        included, the dropped tail not). The same every epoch; ``len(ShardLoader)`` counts steps."""
        _, world = rank_and_world(self.options.rank, self.options.world_size)
        if not self.options.reads:
            return 0
        return self.step_plan(self._epoch, world, 0).steps_per_rank * self.params.batch_size

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The stored sample at global ``index`` (manifest order, as ``batch["_index"]``), read
        through range reads (no whole-shard download); no transform. Not thread-safe."""
        return self.source.sample(index)

    # ---- iteration (in the consumer's process) --------------------------------------------
    def _shard_cache(self) -> ShardCache | None:
        if self.options.cache_dir is None or not self.source.needs_cache():
            return None
        if self._cache is None:
            self._cache = ShardCache(self.options.cache_dir, self.options.cache_limit)
        return self._cache

    def __iter__(self) -> Iterator[Any]:
        check_caller(f"StreamingDataset({self.path!r})")  # only ShardLoader may batch it (R11)
        payload = self.control.read() or {}
        changed = self.source.receive(payload)  # a persistent worker: the loaded state of this iteration (L6)
        if self.batching.receive(payload) or changed:
            self._plans.clear()
        topology = consumer_topology(self.options.rank, self.options.world_size, payload)
        epoch = payload.get("epoch", self._epoch)
        plan = self.step_plan(epoch, topology.world_size, topology.num_workers, payload.get("resume"),
                              payload_group(topology, payload))
        cache = self._shard_cache()
        collate = self.batching.collate_for(self.source, self.params.tail == "pad", self.options.with_index)
        emitter, group = consumer_emitter(plan, topology, payload, epoch, collate, cache)
        batch_size = self.params.batch_size
        batches = self.batching.batches(self.source, plan, emitter, cache, batch_size,  # type: ignore[arg-type]
                                        self.options.with_index)
        return batches if group == 1 else in_groups(batches, group, emitter.position // batch_size)

    # ---- pickling for spawn-started workers -----------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = None
        state["_plans"] = StepPlans()
        return state

