"""``ShardLoader``: a torch ``DataLoader`` over a ``StreamingDataset`` that records, per global
consumer, how many samples the training loop has actually received (G5 in docs/guarantees.md)
and restores from it, also on another topology (G6). Implements the ``Stateful`` protocol of
``torch.distributed.checkpoint``.

Loader state (specs/resume-state.md §Loader)::

    {"version": 1, "kind": "shardkit.loader", "epoch": int, "steps": int,
     "plan": <plan state: fingerprint, params, offsets per consumer, parent>}

``state_dict()`` is collective when ``torch.distributed`` is initialized with world size > 1:
every rank must call it at the same step; all get the same global state.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from shardkit.errors import StateError
from shardkit.loader.dataset import StreamingDataset
from shardkit.loader.epochs import EpochCursor
from shardkit.loader.guard import passthrough
from shardkit.loader.loader_stats import LoaderStats
from shardkit.loader.mixture_state import gather_sum
from shardkit.loader.rank_stats import gather_rank_stats
from shardkit.loader.topology import Topology, rank_and_world
from shardkit.loader.transfer.meta import META_KEY, BatchMeta
from shardkit.loader.transfer.packed import BatchGroup, PackedBatch
from shardkit.loader.transfer.ring import Ring
from shardkit.plan import validate_state

log = logging.getLogger(__name__)
LOADER_STATE_VERSION = 1
LOADER_STATE_KIND = "shardkit.loader"
DEFAULT_PREFETCH = 4  # batches asked ahead per worker (rounded up to whole groups, at least 2 groups:
# 8 batches at the default group of 4); 2 (DataLoader's default) left workers idle at W=2
DEFAULT_BATCHES_PER_TRANSFER = 4  # batches per DataLoader item (X8); see __init__
RING_SPARE_SLOTS = 3  # ring slots per worker beyond the batches in flight: ones the loop holds


class ShardLoader(DataLoader):  # type: ignore[type-arg,unused-ignore]
    def __init__(
        self,
        dataset: StreamingDataset,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        multiprocessing_context: Any = None,
        in_order: bool = True,
        timeout: float = 0,
        log_every: int | None = None,
        batches_per_transfer: int = DEFAULT_BATCHES_PER_TRANSFER,
    ) -> None:
        """Arguments as for ``torch.utils.data.DataLoader``, plus:

        ``log_every``: steps between periodic INFO lines with ``stats()`` (None: off).
        ``batches_per_transfer``: with workers, each worker sends this many consecutive batches
        of its consumer as one DataLoader item, so DataLoader's per-item cost (two queues, a
        feeder thread, unpickling: ~2–3 µs per token sample at batch 64 on 2 cores) is paid
        once per group; the loop still receives one batch per step. ``prefetch_factor`` then
        counts groups (default: enough groups for ``DEFAULT_PREFETCH`` batches, at least 2).
        1 sends batches one by one.
        """
        if not isinstance(dataset, StreamingDataset):
            raise TypeError(f"ShardLoader needs a StreamingDataset, got {type(dataset).__name__}")
        if type(batches_per_transfer) is not int or batches_per_transfer < 1:  # bool is not int here
            raise ValueError(f"batches_per_transfer must be an int >= 1, got {batches_per_transfer!r}")
        group = batches_per_transfer if num_workers > 0 else 1
        wanted = max(dataset.prefetch_batches(num_workers) or DEFAULT_PREFETCH, DEFAULT_PREFETCH)  # mixtures: MX15
        default_prefetch = max(2, -(-wanted // group))
        super().__init__(
            dataset,
            batch_size=None,
            num_workers=num_workers,
            collate_fn=passthrough,  # the dataset refuses any other collation (R11)
            pin_memory=pin_memory,
            prefetch_factor=(prefetch_factor or default_prefetch) if num_workers > 0 else None,
            persistent_workers=persistent_workers and num_workers > 0,
            multiprocessing_context=multiprocessing_context,
            in_order=in_order,
            timeout=timeout,
        )
        self.streaming = dataset
        self.log_every = log_every  # steps between periodic INFO stats lines (None: off)
        self.batches_per_transfer = group
        self._resume: dict[str, Any] | None = None  # plan state to apply at the next iteration
        self._offsets: dict[int, int] = {}
        self._iter_resume: dict[str, Any] | None = None
        self._iter_topology: Topology | None = None
        self._steps = 0
        self._generation = 0
        self._stats = LoaderStats()
        self._ring: Ring | None = None
        self._tally = dataset.new_tally()  # per-source samples received (mixtures, MX9)
        self._cursor = EpochCursor()  # which epoch the next iteration reads (R10)

    # ---- epochs -----------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next ``iter(loader)``, read from its start; without it, epochs
        advance by themselves (R10). A pending resume of another epoch is dropped."""
        if self._resume is not None and epoch != self.streaming.epoch:
            if not self._cursor.advances(self.streaming.epoch):  # a finished epoch's state: no loss
                log.warning("set_epoch(%d) drops the loaded state of epoch %d", epoch,
                            self.streaming.epoch)
            self._resume = None
        if epoch != self.streaming.epoch:
            self._offsets, self._steps, self._iter_topology = {}, 0, None
        self.streaming.set_epoch(epoch)
        self._cursor.chosen()

    @property
    def epoch(self) -> int:
        """The epoch the current (or last) iteration reads."""
        return self.streaming.epoch

    def _next_iteration(self) -> tuple[int, dict[str, Any] | None]:
        """The epoch and plan state the next ``iter(loader)`` uses (R10), without side effects."""
        if self._cursor.advances(self.streaming.epoch):
            return self.streaming.epoch + 1, None
        if self._cursor.continues(self.streaming.epoch):
            return self.streaming.epoch, self._continuation()
        return self.streaming.epoch, self._resume

    def _continuation(self) -> dict[str, Any] | None:
        """The plan state of this rank's consumed boundary in the unfinished iteration (local: only
        this rank's consumers move, and the next iteration runs on the same topology)."""
        topology = self._topology()
        if self._iter_topology is None or topology != self._iter_topology:
            log.warning("the topology changed since the unfinished iteration; epoch %d restarts",
                        self.streaming.epoch)
            return None
        plan = self.streaming.step_plan(self.streaming.epoch, topology.world_size, self.num_workers,
                                   self._iter_resume)
        offsets = [self._offsets.get(c, start) for c, start in enumerate(plan.start_offsets)]
        return self.streaming.plan_state(plan, offsets, self.streaming.epoch)

    def _topology(self) -> Topology:
        rank, world = rank_and_world(self.streaming.options.rank, self.streaming.options.world_size)
        return Topology(rank, world, 0, self.num_workers)

    def __len__(self) -> int:
        """Steps (batches) this rank yields: in the iteration under way, all of them; otherwise
        in the next ``iter(loader)`` (R10: a continued epoch counts only what is left)."""
        topology = self._topology()
        if self._cursor.live and self._iter_topology is not None:
            epoch, resume = self.streaming.epoch, self._iter_resume
        else:
            epoch, resume = self._next_iteration()
        return self.streaming.num_batches(epoch, topology.rank, topology.world_size, self.num_workers, resume)

    # ---- iteration: the consumed boundary ---------------------------------------------------
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        topology = self._topology()
        epoch, resume = self._next_iteration()
        self._resume = None
        self.streaming.set_epoch(epoch)
        plan = self.streaming.step_plan(epoch, topology.world_size, self.num_workers, resume)
        self._iter_topology, self._iter_resume = topology, resume
        self._offsets = dict(enumerate(plan.start_offsets))
        if self._tally is not None:
            self._tally.reset(list(plan.start_offsets))
        self._steps = 0
        self._generation += 1
        self._cursor.started(self._generation, epoch)
        ring = self._ring_for_workers()
        self.streaming.publish(topology, resume, self._generation, ring, self.batches_per_transfer)
        self._stats.reset()
        return self._track(super().__iter__(), ring, self._generation)

    def _ring_for_workers(self) -> Ring | None:
        """Shared slots for this iteration's batches (``ring.py``), made before workers fork.

        Persistent workers keep the ring they inherited; fresh workers get a fresh ring, so a
        ring is only ever written by one set of workers. None (fresh buffers per batch) without
        workers, with spawn/forkserver workers, or if the mapping cannot be made."""
        if self.num_workers == 0:
            return None
        if self.persistent_workers and self._iterator is not None:
            return self._ring
        context = self.multiprocessing_context
        method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
        if method != "fork":
            self._ring = None
            return None
        try:
            in_flight = ((self.prefetch_factor or 2) + 1) * self.batches_per_transfer  # sent + being made
            self._ring = Ring(self.num_workers, in_flight + RING_SPARE_SLOTS)
        except (OSError, ValueError) as exc:
            log.debug("no shared batch ring (%s); batches use fresh buffers", exc)
            self._ring = None
        return self._ring

    def _track(self, batches: Iterator[Any], ring: Ring | None, generation: int) -> Iterator[Any]:
        """``_batches`` of iteration ``generation``, telling the epoch cursor how it ended (R10)."""
        try:
            yield from self._batches(batches, ring)
            self._cursor.ended(generation)
        finally:
            self._cursor.closed(generation)

    def _batches(self, batches: Iterator[Any], ring: Ring | None) -> Iterator[Any]:
        """Yield ``batches`` unpacked, recording the consumed boundary. Holds ``ring`` for as long
        as this iteration's workers may still name it (a later ``iter(loader)`` makes a new one)."""
        next_batch = _unprofiled_next(batches)
        queued: list[Any] = []  # the rest of a group, last batch first
        while True:
            asked = time.perf_counter()
            in_group = bool(queued)
            if in_group:
                batch = queued.pop()
            else:
                try:
                    batch = next_batch()
                except StopIteration:
                    return
                if isinstance(batch, BatchGroup):
                    queued = batch.batches[::-1]
                    batch = queued.pop()
            if isinstance(batch, PackedBatch):
                batch = batch.unpack()
            meta: BatchMeta | None = batch.pop(META_KEY, None) if isinstance(batch, dict) else None
            if meta is not None:
                self._offsets[meta.consumer] = meta.position  # received by the training loop (G5, L1)
            if self._tally is not None:
                self._tally.record(batch, meta)
            self._steps += 1
            counts = (batch["num_tokens"], batch["num_padding"]) if self.streaming.yields_tokens else None
            self._stats.step(time.perf_counter() - asked, self.streaming.params.batch_size, meta, in_group, counts)
            if self.log_every and self._steps % self.log_every == 0:
                log.info("shardkit loader: %s", _stats_line(self._stats.summary()))
            yield batch

    def stats(self, gather: bool = False) -> dict[str, Any]:
        """Wait-time percentiles and throughput of the current iteration (G10).

        ``gather=True`` adds the cross-rank view (loader/rank_stats.py): each rank's data-wait
        fraction and host under ``"ranks"``, and the ``"straggler"`` (rank, host, slowest shard)
        or None. Collective when distributed, like ``state_dict``: every rank must call it."""
        summary = self._stats.summary()
        if self._tally is not None:
            summary["sources"] = self._tally.summary()  # this rank's samples received, per source
        if gather:
            summary.update(gather_rank_stats(summary, self._stats.slowest_open(), self._topology(),
                                             self._shard_name))
        return summary

    def _shard_name(self, shard_index: int) -> str | None:
        """The name of shard ``shard_index`` (None for a mixture: its indices are per source)."""
        shards = self.streaming.dataset.manifest.shards if self._tally is None else ()  # a tally: a mixture
        return shards[shard_index].name if 0 <= shard_index < len(shards) else None

    # ---- Stateful -----------------------------------------------------------------------------
    def consumed_snapshot(self) -> tuple[dict[int, int], int]:
        """This rank's consumed offsets and step count right now (cheap, local; see ``state_dict``)."""
        return dict(self._offsets), self._steps

    def rewind(self, snapshot: tuple[dict[int, int], int]) -> None:
        """Take the consumed boundary back to ``snapshot`` (from ``consumed_snapshot``) in the
        iteration under way: batches handed over since then were a look-ahead the loop never
        used (``DevicePrefetcher``'s staged batch); an abandoned iteration continues there (R10)."""
        offsets, steps = snapshot
        self._offsets.update(offsets)
        self._steps = steps

    def state_dict(self, snapshot: tuple[dict[int, int], int] | None = None) -> dict[str, Any]:
        """The global consumed offsets; collective across ranks when distributed (G5).

        ``snapshot`` (from ``consumed_snapshot``) states an earlier boundary, e.g. the one before a
        batch a device prefetcher has staged but the training loop has not received yet."""
        consumed, steps = snapshot if snapshot is not None else (self._offsets, self._steps)
        topology = self._iter_topology or self._topology()
        resume = self._iter_resume if self._iter_topology else self._resume
        epoch = self.streaming.epoch
        plan = self.streaming.step_plan(epoch, topology.world_size, self.num_workers, resume)
        offsets = list(plan.start_offsets)
        for consumer, position in consumed.items():
            offsets[consumer] = position
        offsets = _gather_offsets(offsets, topology, max(self.num_workers, 1))
        received = None if self._tally is None else gather_sum(self._tally.at(consumed), topology)
        extra = self.streaming.state_part(epoch, resume, received)  # a mixture's or weights' part
        return {
            "version": LOADER_STATE_VERSION,
            "kind": LOADER_STATE_KIND,
            "epoch": epoch,
            "steps": steps,
            "plan": self.streaming.plan_state(plan, offsets, epoch),
            **extra,
            **self.streaming.extra_state(plan, offsets),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the saved consumed boundary at the next ``iter(loader)`` — on any topology."""
        check_loader_state(state, None)  # its shape first (L5), then the dataset's part (a mixture's)
        check_loader_state(state, self.streaming.load_state_part(state))
        self.streaming.set_epoch(int(state["epoch"]))
        self._resume = state["plan"]
        self._offsets, self._steps, self._iter_topology = {}, 0, None
        self._cursor.chosen()
        if self._nothing_left(self._resume):  # saved at the end of its epoch: the next one follows (R10)
            self._cursor.restored_ended(self.streaming.epoch)

    def _nothing_left(self, resume: dict[str, Any]) -> bool:
        """Whether the epoch of plan state ``resume`` has no batch left for any consumer."""
        topology = self._topology()
        try:
            plan = self.streaming.step_plan(self.streaming.epoch, topology.world_size, self.num_workers, resume)
        except StateError:
            return False  # refused with its reason at the next iter(loader) (R9)
        batch = self.streaming.params.batch_size
        return all(plan.num_batches(c) == plan.start_offsets[c] // batch for c in range(plan.num_consumers))


def _unprofiled_next(batches: Iterator[Any]) -> Callable[[], Any]:
    """``next(batches)`` without DataLoader's per-item ``record_function`` when no profiler is on.

    That span only matters to a running torch profiler (with one on, the plain ``__next__``,
    span included, is used). Measured again with groups of 4 (2026-12-01, shared 2-core machine
    under load 8–14, 60k token samples, batch 64, paired alternations in one process): at W=0
    (one batch per item) 63.7k against 50.4k samples/s, paired ratio median 1.27 over 10 pairs
    (all ≥ 1.04); at W=2 (one span per group of 4) 158k against 149k, paired ratios 0.78–3.7
    (median 0.96, 8 pairs): lost in the noise. Kept for W=0. Falls back to ``__next__``
    whenever the iterator lacks the (private, long-stable) attributes this relies on."""
    next_data = getattr(batches, "_next_data", None)
    profiler_on = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
    if next_data is None or profiler_on is None or not hasattr(batches, "_num_yielded"):
        return batches.__next__

    def fast() -> Any:
        if profiler_on() or getattr(batches, "_sampler_iter", None) is None:
            return next(batches)
        data = next_data()
        batches._num_yielded += 1
        return data

    return fast


def _stats_line(stats: dict[str, Any]) -> str:
    tokens = "" if "tokens_per_s" not in stats else \
        f"{stats['tokens_per_s']:.0f} effective tokens/s ({stats['padding_fraction']:.1%} padding), "
    return (
        f"{stats['steps']} steps, {tokens}{stats['samples_per_s']:.0f} samples/s, "
        f"{stats['decoded_bytes_per_s'] / 1e6:.1f} MB/s decoded, wait p50 {stats['wait_p50_s'] * 1e3:.2f} ms "
        f"p99 {stats['wait_p99_s'] * 1e3:.2f} ms, cache hits {stats['cache']['cache_hits']:.0f} "
        f"misses {stats['cache']['cache_misses']:.0f}"
    )


def check_loader_state(state: Any, fingerprint: str | None) -> None:
    """Refuse malformed, newer or foreign states with a clear ``StateError`` (G6); ``None``:
    check the shape only."""
    if not isinstance(state, dict) or state.get("kind") != LOADER_STATE_KIND:
        raise StateError("not a shardkit loader state (missing kind='shardkit.loader')")
    version = state.get("version")
    if not isinstance(version, int) or version > LOADER_STATE_VERSION:
        raise StateError(f"loader state version {version!r}; this shardkit reads <= {LOADER_STATE_VERSION}")
    if not isinstance(state.get("epoch"), int) or not isinstance(state.get("plan"), dict):
        raise StateError("loader state needs an int 'epoch' and a 'plan' object")
    params = state["plan"].get("params")
    if not isinstance(params, dict):
        raise StateError(f"state.params: plan params: expected an object, got {type(params).__name__}")
    if fingerprint is not None:
        validate_state(state["plan"], fingerprint)  # also refuses a malformed plan
    if params.get("epoch") != state["epoch"]:
        raise StateError("loader state: 'epoch' and plan params disagree")


def _gather_offsets(offsets: list[int], topology: Topology, width: int) -> list[int]:
    """Every rank's offsets for its own consumers, combined (all_gather; no pickling)."""
    if topology.world_size == 1:
        return offsets
    if not (dist.is_available() and dist.is_initialized()):
        raise StateError(
            "state_dict() with world_size > 1 needs torch.distributed initialized: it gathers "
            "every rank's consumed offsets"
        )
    lo = topology.rank * width
    mine = torch.tensor(offsets[lo : lo + width], dtype=torch.int64)
    parts = [torch.empty_like(mine) for _ in range(topology.world_size)]
    dist.all_gather(parts, mine)
    return [int(x) for x in torch.cat(parts).tolist()]
