"""``StreamingDataset``: an IterableDataset that yields whole batches of one global consumer.

Each ``__iter__`` (in a DataLoader worker, or in the training process when ``num_workers=0``)
reads the epoch, topology and resume state from the loader's control block, builds the pure
plan (shardkit.plan) and streams consumer ``rank × W + worker``'s batches (G2, G3 in
docs/guarantees.md): ``cut_batches`` (batcher.py, pure) groups the reader's samples into batches,
an ``Emitter`` (emitter.py) collates and packs them. Every dict batch carries ``_shardkit`` = a
``BatchMeta`` (consumer, end position, epoch as ints) so the training process can record what it
actually received (G5); ``ShardLoader`` strips it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.utils.data import IterableDataset

from shardkit.errors import PlanError
from shardkit.loader.batcher import BatchCut, cut_batches
from shardkit.loader.collate import collate_samples
from shardkit.loader.collate_columns import collate_pieces
from shardkit.loader.data_parallel import as_data_parallel
from shardkit.loader.dataset_kind import subclass_for
from shardkit.loader.dataset_plans import DatasetPlans
from shardkit.loader.emitter import Emitter
from shardkit.loader.env import cache_settings, offline_setting
from shardkit.loader.epoch_check import check_dataset
from shardkit.loader.guard import check_caller
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.topology import Topology, rank_and_world, worker_slot
from shardkit.loader.transfer.arena import alloc_like
from shardkit.loader.transfer.control import Control
from shardkit.loader.transfer.meta import META_KEY
from shardkit.loader.transfer.packed import in_groups
from shardkit.loader.transfer.ring import Ring, find
from shardkit.loader.transforms import Transform, takes_context, transformed
from shardkit.plan import Plan, PlanParams, worker_consumer
from shardkit.plan.params import default_spread
from shardkit.plan.rotation import StepPlan
from shardkit.plan.token_config import TokenBlocks
from shardkit.read import ReadOptions, StoredDataset, open_dataset
from shardkit.read.column_pieces import ColumnPiece, as_samples
from shardkit.read.dataset import split_manifest_path
from shardkit.read.mixture import Mixture
from shardkit.read.random_access import RandomAccess
from shardkit.read.stream import WindowSamples, iter_consumer
from shardkit.storage import ShardCache, split_protocol

log = logging.getLogger(__name__)
__all__ = ["META_KEY", "StreamOptions", "StreamingDataset"]


@dataclass(frozen=True)
class StreamOptions:
    """What to read and how (everything but the plan parameters)."""

    with_index: bool = False
    cache_dir: str | None = None
    cache_limit: int = 200 << 30
    storage_options: dict[str, Any] | None = None
    rank: int | None = None  # the data-parallel rank and size (data_parallel=), else read at __iter__
    world_size: int | None = None
    reads: bool = True  # False: a rank that needs no data (DataParallel(reads=False), P26)


class StreamingDataset(DatasetPlans, IterableDataset):  # type: ignore[type-arg,unused-ignore]
    """Batches of ``batch_size`` samples from a shardkit dataset, exactly once per epoch.

    ``transform`` maps one sample dict (in the worker, before collation) — ``transform(sample)``,
    or ``transform(sample, ctx)`` with a ``SampleContext`` (global index, epoch, seed; decided
    from the signature once: loader/transforms.py); ``collate_fn`` maps a
    list of samples to a batch (default: ``collate_samples``). Both must be picklable for
    spawn-started workers. Rank and world size are the default group's, read at ``__iter__``,
    unless ``data_parallel=`` (an ``sk.DataParallel``, ``ProcessGroup``, ``DeviceMesh`` or ``(rank,
    size)``) names the data-parallel group, resolved here once (specs/partition.md P22-P26).
    ``path`` may be a ``Mixture`` or a mixture file: the result is then a ``MixtureDataset``.
    ``sample_weights=`` (a numeric field or one weight per sample) and ``samples_per_epoch=``
    make a ``WeightedDataset`` (specs/sample-weights.md).
    ``tokens=sk.TokenBlocks(seq_len, ...)``: batches of ``batch_size`` fixed-length token blocks
    instead of samples (a ``TokenDataset``, specs/token-blocks.md).
    ``spread``: when shuffling, each shard is split among about this many consumers, so a window
    mixes that many times more shards; by default 12 for a dataset not shuffled at pack time and
    1 for one that was (specs/partition.md P18-P19; 1 = each consumer reads one contiguous run
    of shards).
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
    The plans of its epochs and its part of a loader state: loader/dataset_plans.py.
    """

    def __new__(cls, path: Any = None, *args: Any, **kwargs: Any) -> StreamingDataset:
        """``StreamingDataset(mixture, ...)`` - a ``Mixture`` or the path of a mixture file
        (.toml/.json) - makes a ``MixtureDataset`` (a subclass; specs/mixture.md); ``tokens=`` and
        ``sample_weights=`` make theirs too (loader/dataset_kind.py)."""
        kind = subclass_for(path, kwargs) if cls is StreamingDataset else None
        return super().__new__(kind or cls)

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
        with_index: bool = False,
        cache_dir: str | bool | None = None,  # None: $SHARDKIT_CACHE_DIR or ~/.cache/shardkit; False: none
        cache_limit: int | str | None = None,  # None: $SHARDKIT_CACHE_LIMIT or 200GiB (loader/env.py)
        storage_options: dict[str, Any] | None = None,
        transform: Transform | None = None,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        tokens: TokenBlocks | None = None,
        quality_field: str | None = None,
        data_parallel: Any = None,
        offline: str | None = None,
    ) -> None:
        if not isinstance(path, str):
            raise TypeError(f"StreamingDataset: expected a dataset path or a Mixture, got {type(path).__name__}")
        if tokens is not None and not self.yields_tokens:
            raise TypeError(f"{type(self).__name__}(..., tokens=...): token blocks with sample_weights= are not "
                            f"supported; over a mixture, use sk.StreamingDataset(mixture, tokens=...)")
        self.path = path
        self.params = PlanParams(seed=seed, batch_size=batch_size, tail=tail, shuffle=shuffle,
                                 shuffle_window=shuffle_window, interleave=interleave)
        remote = split_protocol(split_manifest_path(path))[0] != "file"
        cache_dir, limit = cache_settings(cache_dir, cache_limit, remote=remote)  # K47: loader/env.py
        self.options = StreamOptions(with_index=with_index, cache_dir=cache_dir,
                                     cache_limit=limit, storage_options=storage_options)
        if data_parallel is not None:  # ints from here on: nothing unpicklable reaches a worker
            dp = as_data_parallel(data_parallel).resolve()
            self.options = replace(self.options, rank=dp.rank, world_size=dp.size, reads=dp.reads)
        self.quality_field = quality_field
        self.transform = transform
        self._transform_context = transform is not None and takes_context(transform)  # ctx (SampleContext)?
        self.collate_fn = collate_fn or collate_samples
        # The node cache also holds the manifest: one download per node, not per rank (K18). Its
        # own instance: the shard cache (and its counters, G10) is made where shards are read.
        manifest_cache = ShardCache(cache_dir, limit) if cache_dir and remote else None
        self.dataset: StoredDataset = open_dataset(path, storage_options, manifest_cache,
                                                   offline_setting(offline))
        if spread is None:  # P19: spread only what was not shuffled at pack time
            spread = default_spread(self.dataset.manifest.order)
        self.params = replace(self.params, spread=spread)
        if tokens is None:  # a batch of token blocks may come from fewer documents
            check_dataset(self.dataset.manifest.num_samples, self.params)  # fewer samples than a batch (P16)
        self.control = Control()
        self._epoch = 0
        self._cache: ShardCache | None = None
        self._plans: dict[str, Plan] = {}
        self._lookup: RandomAccess | None = None  # ds[i] (read/random_access.py), opened lazily

    # ---- configuration from the training process ------------------------------------------
    @property
    def yields_tokens(self) -> bool:
        """Whether batches are token blocks carrying ``num_tokens``/``num_padding`` (TB9)."""
        return False

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
                            "ring": list(ring.key) if ring is not None else None})

    # ---- sizes and random access: sizes count samples; len(ShardLoader) counts steps (R12) ----
    @property
    def num_samples(self) -> int:
        """Samples in the dataset (every shard), whatever the topology."""
        return self.dataset.manifest.num_samples

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
        return self._random_access().sample(index)

    def _random_access(self) -> RandomAccess:
        dataset = self.dataset.in_this_process()
        if self._lookup is None or self._lookup.dataset is not dataset:
            self.dataset = dataset
            self._lookup = RandomAccess(dataset)
        return self._lookup

    # ---- iteration (in the consumer's process) --------------------------------------------
    def _topology(self, payload: dict[str, Any]) -> Topology:
        rank, world = rank_and_world(
            self.options.rank if self.options.rank is not None else payload.get("rank"),
            self.options.world_size if self.options.world_size is not None else payload.get("world_size"),
        )
        worker, num_workers = worker_slot()
        return Topology(rank, world, worker, num_workers)

    def _shard_cache(self) -> ShardCache | None:
        if self.options.cache_dir is None or not self.dataset.store.worth_caching:
            return None
        if self._cache is None:
            self._cache = ShardCache(self.options.cache_dir, self.options.cache_limit)
        return self._cache

    def __iter__(self) -> Iterator[Any]:
        check_caller(f"StreamingDataset({self.path!r})")  # only ShardLoader may batch it (R11)
        self.dataset = self.dataset.in_this_process()
        payload = self.control.read() or {}
        topology = self._topology(payload)
        epoch = payload.get("epoch", self._epoch)
        plan = self.plan(epoch, topology.world_size, topology.num_workers, payload.get("resume"))
        emitter, group = self._emitter(plan, topology, payload, epoch)
        consumer, start = emitter.consumer, emitter.position
        windows = self._windows(plan, consumer, start, self._shard_cache(), emitter.stats)
        batches = map(emitter.emit, cut_batches(windows, self.params.batch_size, consumer))
        return batches if group == 1 else in_groups(batches, group, start // self.params.batch_size)

    def _emitter(self, plan: StepPlan, topology: Topology, payload: dict[str, Any], epoch: int) -> tuple[Emitter, int]:
        """The emitter of the consumer of ``plan`` this worker serves, and how many batches it
        sends at once (its group)."""
        # Pack batches for the trip to the trainer only where ShardLoader will unpack them.
        pack = topology.num_workers > 0 and "generation" in payload
        group = max(int(payload.get("group", 1)), 1) if pack else 1
        consumer = worker_consumer(plan, topology.rank, topology.worker, topology.num_workers, group)
        if consumer >= plan.num_consumers:
            raise PlanError(f"consumer {consumer} is outside the plan's {plan.num_consumers} consumers")
        start = plan.start_offsets[consumer]
        ring = find(payload.get("ring")) if pack else None  # inherited from a forking trainer
        cache = self._shard_cache()
        stats = WorkerStats(cache=cache.stats if cache else None)
        return Emitter(self._collate, stats, consumer, epoch, start, pack, ring, topology.worker), group

    def _windows(self, plan: Plan, consumer: int, start: int, cache: ShardCache | None,
                 stats: WorkerStats) -> Iterator[WindowSamples]:
        """The consumer's samples in plan order, transformed if there is a ``transform``."""
        # The default collation copies every value into the batch at once, so large samples may
        # come as views of the (verified) block instead of copies (format/sample_views.py), and
        # column blocks as their columns (loader/collate_columns.py).
        views = self.transform is None and self.collate_fn is collate_samples
        options = ReadOptions(read_ahead=_spare_core(plan.params.num_workers), views=views)
        windows = self._read_consumer(plan, consumer, start, cache, stats, options)
        if self.transform is None:
            return windows
        return transformed(windows, self.transform, self._transform_context, plan.params.epoch, plan.params.seed)

    def _read_consumer(self, plan: Plan, consumer: int, start: int, cache: ShardCache | None,
                       stats: WorkerStats, options: ReadOptions) -> Iterator[WindowSamples]:
        """Consumer ``consumer``'s samples from ``start`` (a mixture dataset reads its sources)."""
        return iter_consumer(self.dataset, plan, consumer, start, cache, stats.read, options)

    def _collate(self, cut: BatchCut) -> Any:
        parts, batch = cut.parts, None
        if all(isinstance(part, ColumnPiece) for part in parts):  # only with the default collation
            batch = collate_pieces(parts)  # type: ignore[arg-type]
        if batch is None:
            batch = self.collate_fn([sample for part in parts for sample in as_samples(part, views=True)])
        if isinstance(batch, dict):
            if self.params.tail == "pad":
                batch["_padded"] = alloc_like(cut.padded, torch.bool)
            if self.options.with_index:
                batch["_index"] = alloc_like(cut.indices, torch.int64)
        return batch

    # ---- pickling for spawn-started workers -----------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = None
        state["_plans"] = {}
        state["_lookup"] = None
        return state


def _spare_core(num_workers: int) -> bool:
    """Whether a reading process has a core to spare for a read-ahead thread: the consumers
    (the workers, or the training process itself) and the training process need one each, on
    every rank of this node (``LOCAL_WORLD_SIZE``, set by torchrun)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        local_ranks = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    except ValueError:
        local_ranks = 1
    busy = local_ranks * (max(num_workers, 1) + (1 if num_workers > 0 else 0))
    return cores > busy
