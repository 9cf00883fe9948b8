"""The effectful half of a consumer's stream: a ``BatchCut`` → the object that leaves
``StreamingDataset.__iter__`` (specs/batch-transport.md, X1).

Per batch: collate into the right memory (a ring slot or fresh buffer via an ``Arena`` in a
worker whose batches ``ShardLoader`` unpacks; the ``Recycler`` elsewhere), attach the
``BatchMeta`` (consumed boundary as ints + stats snapshot, X9), and pack the batch into one
buffer for the trip (X7).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

from shardkit.errors import PlanError
from shardkit.loader.batcher import BatchCut
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.resume_check import cut_head
from shardkit.loader.topology import Topology, rank_and_world, worker_slot
from shardkit.loader.transfer.arena import Arena, allocating, batch_arena
from shardkit.loader.transfer.meta import META_KEY, BatchMeta
from shardkit.loader.transfer.packed import PackedBatch, pack_batch
from shardkit.loader.transfer.recycler import Recycler
from shardkit.loader.transfer.ring import Ring, SlotRef, find
from shardkit.plan import worker_consumer
from shardkit.plan.rotation import StepPlan
from shardkit.storage import ShardCache

FIRST_ARENA_BYTES = 64 << 10  # grows to what batches ask for, plus 1/8


class Emitter:
    """Collates, labels and packs the batches of one consumer, in order.

    ``position``: where the consumer's sequence stands before the first batch; ``pack``: the
    batches go to ``ShardLoader`` through a worker's result pipe (packed, X7), else they are
    dicts collated with the ``Recycler`` (X6)."""

    def __init__(self, collate: Callable[[BatchCut], Any], stats: WorkerStats, consumer: int, epoch: int,
                 position: int, pack: bool, ring: Ring | None = None, worker: int = 0) -> None:
        self.collate, self.stats = collate, stats
        self.consumer, self.epoch, self.position = consumer, epoch, position
        self.pack, self.ring, self.worker = pack, ring, worker
        self.capacity = FIRST_ARENA_BYTES
        self.recycler = Recycler()
        self.head: tuple[int, ...] = ()  # set for the first batch only (R19)

    def emit(self, cut: BatchCut) -> Any:
        return self.emit_made(lambda: self.collate(cut), len(cut.indices))

    def emit_cuts(self, cuts: Iterator[BatchCut]) -> Iterator[Any]:
        """Every cut of ``cuts`` emitted; the first one's ``BatchMeta`` names its head (R19), the
        rest are ``map(emit, ...)`` with nothing added per batch (R22)."""
        return itertools.chain(self._first(cuts), map(self.emit, cuts))

    def _first(self, cuts: Iterator[BatchCut]) -> Iterator[Any]:
        for cut in cuts:
            self.head = cut_head(cut.indices)
            batch = self.emit(cut)
            self.head = ()
            yield batch
            return

    def emit_made(self, make: Callable[[], Any], count: int, cursor: tuple[int, ...] = ()) -> Any:
        """Emit the batch ``make()`` builds (its tensors allocated in the right memory), which
        moves the consumer's position by ``count`` (samples, or blocks for token blocks);
        ``cursor``: what else the consumer's state is there, as ints (token blocks, TB28)."""
        started = time.perf_counter()
        arena: Arena | None
        with batch_arena(self.capacity, self.ring, self.worker) if self.pack else allocating(self.recycler) as arena:
            batch = make()
        if arena is not None:
            self.capacity = max(self.capacity, arena.wanted + arena.wanted // 8)
        self.position += count
        self.stats.collate_seconds += time.perf_counter() - started
        if not isinstance(batch, dict):  # a custom collate_fn's batch: no boundary to carry
            if arena is not None:
                arena.discard(reusable=False)
            return batch
        batch[META_KEY] = BatchMeta(self.consumer, self.position, self.epoch, self.stats.snapshot(), cursor,
                                    self.head)
        if arena is None:
            return batch
        packed: PackedBatch = pack_batch(batch, arena)
        if self.ring is not None and not isinstance(packed.buffer, SlotRef):
            self.stats.fresh_buffers += 1  # reported with the next batch
        return packed


def consumer_topology(rank: int | None, world_size: int | None, payload: dict[str, Any]) -> Topology:
    """This process's place: the dataset's data-parallel rank and size if it has them, else the
    training process's (from the control block), and the DataLoader worker slot."""
    rank, world = rank_and_world(rank if rank is not None else payload.get("rank"),
                                 world_size if world_size is not None else payload.get("world_size"))
    worker, num_workers = worker_slot()
    return Topology(rank, world, worker, num_workers)


def payload_group(topology: Topology, payload: dict[str, Any]) -> int:
    """Batches a worker sends as one DataLoader item (X8): the loader's group, in a worker whose
    batches ``ShardLoader`` unpacks; 1 elsewhere."""
    pack = topology.num_workers > 0 and "generation" in payload
    return max(int(payload.get("group", 1)), 1) if pack else 1


def consumer_emitter(plan: StepPlan, topology: Topology, payload: dict[str, Any], epoch: int,
                     collate: Callable[[BatchCut], Any], cache: ShardCache | None) -> tuple[Emitter, int]:
    """The emitter of the consumer of ``plan`` this process serves, and how many batches it
    sends at once (its group, X8)."""
    pack = topology.num_workers > 0 and "generation" in payload  # only where ShardLoader unpacks them
    group = payload_group(topology, payload)
    consumer = worker_consumer(plan, topology.rank, topology.worker, topology.num_workers, group)
    if consumer >= plan.num_consumers:
        raise PlanError(f"consumer {consumer} is outside the plan's {plan.num_consumers} consumers")
    ring = find(payload.get("ring")) if pack else None  # inherited from a forking trainer
    stats = WorkerStats(cache=cache.stats if cache else None)
    return Emitter(collate, stats, consumer, epoch, plan.start_offsets[consumer], pack, ring, topology.worker), group
