"""``StreamingDataset``: an IterableDataset that yields whole batches of one global consumer.

Each ``__iter__`` (in a DataLoader worker, or in the training process when ``num_workers=0``)
reads the epoch, topology and resume state from the loader's control block, builds the pure
plan (shardkit.plan) and streams consumer ``rank × W + worker``'s batches (§G2, §G3). Every batch
carries ``_shardkit`` = (consumer, end position, epoch) so the training process can record what
it actually received (§G5); ``ShardLoader`` strips it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset

from shardkit.errors import PlanError
from shardkit.format.columns import ColumnPiece, as_samples
from shardkit.loader.arena import alloc, alloc_like, allocating, batch_arena
from shardkit.loader.collate import collate_samples
from shardkit.loader.columns import collate_pieces
from shardkit.loader.control import Control
from shardkit.loader.packed import in_groups, pack_batch
from shardkit.loader.recycler import Recycler
from shardkit.loader.ring import Ring, SlotRef, find
from shardkit.loader.stats import META_FIELDS, WorkerStats
from shardkit.loader.topology import Topology, rank_and_world, worker_slot
from shardkit.plan import Plan, PlanParams, build_plan
from shardkit.plan.quality import warn_if_unshuffled
from shardkit.read import Dataset, open_dataset
from shardkit.read.shard_reader import Samples
from shardkit.read.stream import iter_consumer
from shardkit.storage import ShardCache
from shardkit.units import parse_size

log = logging.getLogger(__name__)
META_KEY = "_shardkit"


@dataclass(frozen=True)
class StreamOptions:
    """What to read and how (everything but the plan parameters)."""

    with_index: bool = False
    cache_dir: str | None = None
    cache_limit: int = 200 << 30
    storage_options: dict[str, Any] | None = None
    rank: int | None = None  # overrides for tests and custom launchers
    world_size: int | None = None


class StreamingDataset(IterableDataset):  # type: ignore[type-arg,unused-ignore]
    """Batches of ``batch_size`` samples from a shardkit dataset, exactly once per epoch.

    ``transform`` maps one sample dict (in the worker, before collation); ``collate_fn`` maps a
    list of samples to a batch (default: ``collate_samples``). Both must be picklable for
    spawn-started workers. Rank and world size are read at ``__iter__``; a custom launcher can
    pin them with ``ds.options = dataclasses.replace(ds.options, rank=r, world_size=n)``.
    """

    def __init__(
        self,
        path: str,
        *,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        tail: str = "drop",
        shuffle_window: int = 8192,
        interleave: int = 1,
        with_index: bool = False,
        cache_dir: str | None = None,
        cache_limit: int | str = "200GiB",
        storage_options: dict[str, Any] | None = None,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
    ) -> None:
        self.path = path
        self.params = PlanParams(seed=seed, batch_size=batch_size, tail=tail, shuffle=shuffle,
                                 shuffle_window=shuffle_window, interleave=interleave)
        self.options = StreamOptions(with_index=with_index, cache_dir=cache_dir,
                                     cache_limit=parse_size(cache_limit), storage_options=storage_options)
        self.transform = transform
        self.collate_fn = collate_fn or collate_samples
        self.dataset: Dataset = open_dataset(path, storage_options)
        self.control = Control()
        self._epoch = 0
        self._cache: ShardCache | None = None
        self._plans: dict[str, Plan] = {}

    # ---- configuration from the training process ------------------------------------------
    @property
    def fingerprint(self) -> str:
        return self.dataset.manifest.fingerprint

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next iteration; reaches persistent workers (§G4)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self._epoch = epoch

    def publish(self, topology: Topology, resume: dict[str, Any] | None, generation: int,
                ring: Ring | None = None, group: int = 1) -> None:
        """Write what the next iteration's workers need into the control block; ``group``:
        batches a worker sends as one DataLoader item (L10)."""
        self.control.write({"epoch": self._epoch, "rank": topology.rank, "world_size": topology.world_size,
                            "resume": resume, "generation": generation, "group": group,
                            "ring": list(ring.key) if ring is not None else None})

    def plan(self, epoch: int, world_size: int, num_workers: int, resume: dict[str, Any] | None = None) -> Plan:
        """The (cached) plan of ``epoch`` for a topology; ``resume`` = a plan state (§G6)."""
        params = replace(self.params, epoch=epoch, world_size=world_size, num_workers=num_workers)
        key = repr((params, resume))
        plan = self._plans.get(key)
        if plan is None:
            plan = build_plan(self.dataset.manifest.shard_sizes, params, resume)
            warn_if_unshuffled(self.dataset.manifest, params)  # P14: once per dataset and process
            self._plans = {key: plan}
        return plan

    def num_batches(self, epoch: int, rank: int, world_size: int, num_workers: int,
                    resume: dict[str, Any] | None = None) -> int:
        """Batches rank ``rank`` still yields this epoch (all ranks get the same number)."""
        plan = self.plan(epoch, world_size, num_workers, resume)
        batch = self.params.batch_size
        width = max(num_workers, 1)
        consumers = range(rank * width, (rank + 1) * width)
        return sum(plan.num_batches(c) - plan.start_offsets[c] // batch for c in consumers)

    def __len__(self) -> int:
        payload = self.control.read() or {}
        rank, world = rank_and_world(payload.get("rank"), payload.get("world_size"))
        return self.num_batches(payload.get("epoch", self._epoch), rank, world, 0, payload.get("resume"))

    # ---- iteration (in the consumer's process) --------------------------------------------
    def _topology(self, payload: dict[str, Any]) -> Topology:
        rank, world = rank_and_world(
            self.options.rank if self.options.rank is not None else payload.get("rank"),
            self.options.world_size if self.options.world_size is not None else payload.get("world_size"),
        )
        worker, num_workers = worker_slot()
        return Topology(rank, world, worker, num_workers)

    def _shard_cache(self) -> ShardCache | None:
        if self.options.cache_dir is None or self.dataset.store.is_local:
            return None
        if self._cache is None:
            self._cache = ShardCache(self.options.cache_dir, self.options.cache_limit)
        return self._cache

    def __iter__(self) -> Iterator[Any]:
        self.dataset = self.dataset.in_this_process()
        payload = self.control.read() or {}
        topology = self._topology(payload)
        epoch = payload.get("epoch", self._epoch)
        plan = self.plan(epoch, topology.world_size, topology.num_workers, payload.get("resume"))
        # Pack batches for the trip to the trainer only where ShardLoader will unpack them.
        pack = topology.num_workers > 0 and "generation" in payload
        group = max(int(payload.get("group", 1)), 1) if pack else 1
        consumer = self._consumer(plan, topology, group)
        if consumer >= plan.num_consumers:
            raise PlanError(f"consumer {consumer} is outside the plan's {plan.num_consumers} consumers")
        start = plan.start_offsets[consumer]
        ring = find(payload.get("ring")) if pack else None  # inherited from a forking trainer
        batches = self._batches(plan, consumer, start, epoch, pack, ring, topology.worker)
        return batches if group == 1 else in_groups(batches, group, start // self.params.batch_size)

    def _consumer(self, plan: Plan, topology: Topology, group: int = 1) -> int:
        """The global consumer this worker serves (L4, L10).

        DataLoader collects items from workers round-robin, starting at worker 0 on every new
        iteration; an item is a group of ``group`` batches of one consumer, its boundaries on
        multiples of ``group`` in the consumer's sequence. After a same-topology resume, worker
        ``w`` serves consumer ``(w + shift) % W``, shift = whole groups this rank's consumers
        had consumed, mod W: worker 0 gets the consumer whose group was cut by the checkpoint
        (or, if none was, the one next in turn), so the resumed rank yields the uninterrupted
        run's remaining batches in the same order (R2).
        """
        width = max(topology.num_workers, 1)
        first = topology.rank * width
        batch = self.params.batch_size
        consumed = sum(offset // batch // group for offset in plan.start_offsets[first : first + width])
        return first + (topology.worker + consumed) % width

    def _batches(self, plan: Plan, consumer: int, start: int, epoch: int, pack: bool,
                 ring: Ring | None = None, worker: int = 0) -> Iterator[Any]:
        batch_size = self.params.batch_size
        capacity = 64 << 10
        cache = self._shard_cache()
        stats = WorkerStats(consumer, epoch, position=start, cache=cache.stats if cache else None)
        pending: list[Samples] = []  # lists of sample dicts and column pieces, in order
        waiting = 0  # samples in pending
        indices: list[np.ndarray] = []
        padded: list[np.ndarray] = []
        read_ahead = _spare_core(plan.params.num_workers)
        recycler = Recycler()  # batches that are not packed into a ring slot reuse large buffers
        # The default collation copies every value into the batch at once, so large samples may
        # hand it views of the (verified) block instead of copies (format/sample_views.py), and
        # column blocks their columns (loader/columns.py).
        views = self.transform is None and self.collate_fn is collate_samples
        for window in iter_consumer(self.dataset, plan, consumer, start, cache, stats.read, read_ahead, views,
                                    columns=views):
            samples = window.samples  # column pieces only with views
            if self.transform is not None:
                samples = [self.transform(s) for s in as_samples(samples)]
            pending.append(samples)
            waiting += len(samples)
            indices.append(window.indices)
            padded.append(window.padded)
            while waiting >= batch_size:
                started = time.perf_counter()
                all_indices, all_padded = np.concatenate(indices), np.concatenate(padded)
                parts = _take(pending, batch_size)
                waiting -= batch_size
                # In a worker, collate straight into the buffer that crosses to the trainer.
                with batch_arena(capacity, ring, worker) if pack else allocating(recycler) as arena:
                    batch = self._collate(parts, all_indices[:batch_size], all_padded[:batch_size])
                    if isinstance(batch, dict):
                        batch[META_KEY] = alloc_like([0.0] * len(META_FIELDS), torch.float64)
                if arena is not None:
                    capacity = max(capacity, arena.wanted + arena.wanted // 8)
                stats.batch_done(batch_size, time.perf_counter() - started)
                if isinstance(batch, dict):
                    stats.fill(batch[META_KEY].numpy())
                    if arena is not None:
                        batch = pack_batch(batch, arena)
                        if ring is not None and not isinstance(batch.buffer, SlotRef):
                            stats.fresh_buffers += 1  # reported with the next batch
                elif arena is not None:
                    arena.discard(reusable=False)
                yield batch
                indices, padded = [all_indices[batch_size:]], [all_padded[batch_size:]]
        if waiting:
            raise PlanError(f"consumer {consumer}: {waiting} samples left over; plan and reader disagree")

    def _collate(self, parts: list[Samples], indices: np.ndarray, padded: np.ndarray) -> Any:
        batch = None
        if all(isinstance(part, ColumnPiece) for part in parts):  # only with the default collation
            batch = collate_pieces(parts)  # type: ignore[arg-type]
        if batch is None:
            batch = self.collate_fn([sample for part in parts for sample in as_samples(part, views=True)])
        if isinstance(batch, dict):
            if self.params.tail == "pad":
                batch["_padded"] = alloc((len(padded),), torch.bool)
                batch["_padded"].numpy()[:] = padded
            if self.options.with_index:
                batch["_index"] = alloc((len(indices),), torch.int64)
                batch["_index"].numpy()[:] = indices
        return batch

    # ---- pickling for spawn-started workers -----------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = None
        state["_plans"] = {}
        return state


def _take(pending: list[Samples], count: int) -> list[Samples]:
    """The first ``count`` samples of ``pending`` (removed from it), as whole or cut parts."""
    parts: list[Samples] = []
    while count:
        head = pending[0]
        if len(head) <= count:
            parts.append(pending.pop(0))
            count -= len(head)
        else:
            parts.append(head[:count])
            pending[0] = head[count:]
            count = 0
    return parts


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
