"""``ShardLoader``: a torch ``DataLoader`` over a ``StreamingDataset`` that records, per global
consumer, how many samples the training loop has actually received (G5 in docs/guarantees.md)
and restores from it, also on another topology (G6). Implements the ``Stateful`` protocol of
``torch.distributed.checkpoint`` (``state_dict``, ``load_state_dict``: loader/loader_state.py).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from shardkit.loader.audit_sink import AuditSink
from shardkit.loader.boundary import ConsumedBoundary, Snapshot
from shardkit.loader.dataset import StreamingDataset
from shardkit.loader.guard import passthrough
from shardkit.loader.loader_state import LOADER_STATE_KIND, LOADER_STATE_VERSION, check_loader_state
from shardkit.loader.loader_stats import LoaderStats
from shardkit.loader.rank_stats import gather_rank_stats
from shardkit.loader.resume_check import MODES
from shardkit.loader.transfer.meta import META_KEY, BatchMeta
from shardkit.loader.transfer.packed import BatchGroup, PackedBatch
from shardkit.loader.transfer.ring import Ring

log = logging.getLogger(__name__)
__all__ = ["LOADER_STATE_KIND", "LOADER_STATE_VERSION", "ShardLoader", "check_loader_state"]  # state: loader_state.py
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
        batches_per_transfer: int | None = None,
        audit_dir: str | os.PathLike[str] | None = None,
        resume_check: str = "raise",
    ) -> None:
        """Arguments as for ``torch.utils.data.DataLoader``, plus:

        ``log_every``: steps between periodic INFO lines with ``stats()`` (None: off).
        ``batches_per_transfer``: with workers, each worker sends this many consecutive batches
        of its consumer as one DataLoader item, so DataLoader's per-item cost (two queues, a
        feeder thread, unpickling: ~2–3 µs per token sample at batch 64 on 2 cores) is paid
        once per group; the loop still receives one batch per step. ``prefetch_factor`` then
        counts groups (default: enough groups for ``DEFAULT_PREFETCH`` batches, at least 2).
        1 sends batches one by one. None: the dataset's choice (token blocks: 8), else
        ``DEFAULT_BATCHES_PER_TRANSFER``.
        ``audit_dir``: write what each rank trained there, for ``shardkit audit`` (needs
        ``with_index=True``; loader/audit_sink.py, specs/resume-state.md R15).
        ``resume_check``: after ``load_state_dict``, the first batch of each consumer is checked
        against what the state says comes next (R18-R22): ``"raise"`` a ``ResumeMismatchError``,
        ``"warn"`` (a logged warning) or ``"off"``.
        """
        if resume_check not in MODES:
            raise ValueError(f"resume_check must be one of {list(MODES)}, got {resume_check!r}")
        if not isinstance(dataset, StreamingDataset):
            raise TypeError(f"ShardLoader needs a StreamingDataset, got {type(dataset).__name__}")
        if audit_dir is not None and not dataset.options.with_index:
            raise ValueError(f"ShardLoader(audit_dir={os.fspath(audit_dir)!r}) needs the dataset made with "
                             f"with_index=True: the audit names every sample by its _index")
        if batches_per_transfer is None:
            batches_per_transfer = dataset.transfer_batches() or DEFAULT_BATCHES_PER_TRANSFER
        if type(batches_per_transfer) is not int or batches_per_transfer < 1:  # bool is not int here
            raise ValueError(f"batches_per_transfer must be an int >= 1, got {batches_per_transfer!r}")
        group = batches_per_transfer if num_workers > 0 else 1
        if not in_order and num_workers > 1 and dataset.params.order == "global":  # P30, P35
            raise ValueError("ShardLoader(in_order=False) with order='global': the ranks would train the slices of "
                             "different global batches at one step; global order needs in-order delivery")
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
        self._stats = LoaderStats()
        self._ring: Ring | None = None
        # what the loop received and what the next iteration reads (G5, R10; loader/boundary.py)
        self._boundary = ConsumedBoundary(dataset, num_workers,
                                          AuditSink(audit_dir) if audit_dir is not None else None, group,
                                          resume_check)

    # ---- epochs -----------------------------------------------------------------------------
    def set_epoch(self, epoch: int, *, drop_loaded: bool = False) -> None:
        """Select the epoch of the next ``iter(loader)``, read from its start; without it, epochs
        advance by themselves (R10). A pending resume of another epoch is dropped: then the first
        batch fails the resume check (R21) unless ``drop_loaded=True`` says the drop is meant (a
        trainer whose own epoch count wins)."""
        self._boundary.set_epoch(epoch, drop_loaded)

    @property
    def epoch(self) -> int:
        """The epoch the current (or last) iteration reads."""
        return self.streaming.epoch

    @property
    def next_epoch(self) -> int:
        """The epoch the next ``iter(loader)`` reads (R10): the current one continued or resumed,
        or the next one once an iteration ran to its end or a loaded state had nothing left."""
        return self._boundary.next_iteration()[0]

    def epoch_batches(self, epoch: int) -> int:
        """Batches this rank yields in the whole of ``epoch``, from its start, on this topology
        (0 on a rank that reads no data, P26)."""
        topology = self._boundary.topology()
        if not self.streaming.options.reads:
            return 0
        return self.streaming.num_batches(epoch, topology.rank, topology.world_size, self.num_workers,
                                         group=self.batches_per_transfer)

    def __len__(self) -> int:
        """Steps (batches) this rank yields: in the iteration under way, all of them; otherwise
        in the next ``iter(loader)`` (R10: a continued epoch counts only what is left)."""
        topology = self._boundary.topology()
        epoch, resume = self._boundary.current()
        if not self.streaming.options.reads:  # a rank that needs no data (P26)
            return 0
        return self.streaming.num_batches(epoch, topology.rank, topology.world_size, self.num_workers, resume,
                                         self.batches_per_transfer)

    def planned_drops(self) -> np.ndarray:
        """Global sample indices (``batch["_index"]`` values) the plan of the iteration under way
        (else of the next ``iter(loader)``) drops with ``tail="drop"``, on every rank: an audit
        counts them as planned, not lost (R3). Empty with ``tail="pad"``; not for token blocks."""
        return self._boundary.planned_drops()

    # ---- the loader state (Stateful: torch.distributed.checkpoint; loader/boundary.py) ----------
    def consumed_snapshot(self) -> Snapshot:
        """This rank's consumed offsets and step count right now (cheap, local; see ``state_dict``)."""
        return self._boundary.snapshot()

    def rewind(self, snapshot: Snapshot) -> None:
        """Take the consumed boundary back to ``snapshot`` (from ``consumed_snapshot``) in the
        iteration under way: batches handed over since then were a look-ahead the loop never
        used (``DevicePrefetcher``'s staged batch); an abandoned iteration continues there (R10)."""
        self._boundary.rewind(snapshot)

    def state_dict(self, snapshot: Snapshot | None = None) -> dict[str, Any]:
        """The global consumed offsets; collective across ranks when distributed (G5).

        ``snapshot`` (from ``consumed_snapshot``) states an earlier boundary, e.g. the one before a
        batch a device prefetcher has staged but the training loop has not received yet."""
        return self._boundary.state(snapshot).to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the saved consumed boundary at the next ``iter(loader)`` — on any topology."""
        self._boundary.load(state)

    def expect_resume(self) -> None:
        """The caller resumed (a trainer restored a checkpoint): by the next ``iter(loader)`` this
        loader must have been given a state by ``load_state_dict`` (before or after this call),
        else that ``iter`` raises ``ResumeMismatchError`` (or warns, as ``resume_check`` says; R21).
        Whether the state was then continued is the first-batch check's (R19)."""
        self._boundary.expecting = True

    def audit_resumed(self, step: int) -> None:
        """With ``audit_dir=``: this launch resumed after ``step`` steps of the run (the trainer's
        count), for a state saved without ``audit_dir`` (R15); a state saved with it says so itself."""
        if self._boundary.audit is None:
            raise ValueError("audit_resumed() is for a ShardLoader made with audit_dir=")
        self._boundary.audit.resumed(step)

    @property
    def audit_run(self) -> int | None:
        """With ``audit_dir=``: this launch's run number (R15), from its first ``iter(loader)`` on."""
        return None if self._boundary.audit is None else self._boundary.audit.run

    # ---- iteration: the consumed boundary ---------------------------------------------------
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        topology = self._boundary.topology()
        epoch, resume = self._boundary.next_iteration()
        generation = self._boundary.start(topology, epoch, resume)
        self._stats.reset()
        if not self.streaming.options.reads:  # no workers, no reads: an empty epoch (P26)
            return self._track(iter(()), None, generation)
        ring = self._ring_for_workers()
        self.streaming.publish(topology, resume, generation, ring, self.batches_per_transfer)
        return self._track(super().__iter__(), ring, generation)

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
            _warn_no_ring(method)
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
            self._boundary.ended(generation)
        finally:
            self._boundary.cursor.closed(generation)

    def _batches(self, batches: Iterator[Any], ring: Ring | None) -> Iterator[Any]:
        """Yield ``batches`` unpacked, recording the consumed boundary. Holds ``ring`` for as long
        as this iteration's workers may still name it (a later ``iter(loader)`` makes a new one)."""
        next_batch = _unprofiled_next(batches)
        boundary = self._boundary
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
            boundary.received(batch, meta)  # received by the training loop (G5, L1)
            counts = self.streaming.batching.step_counts(batch)
            self._stats.step(time.perf_counter() - asked, self.streaming.params.batch_size, meta, in_group, counts)
            if self.log_every and boundary.steps % self.log_every == 0:
                log.info("shardkit loader: %s", _stats_line(self._stats.summary()))
            yield batch

    def stats(self, gather: bool = False) -> dict[str, Any]:
        """Wait-time percentiles and throughput of the current iteration (G10).

        ``gather=True`` adds the cross-rank view (loader/rank_stats.py): each rank's data-wait
        fraction and host under ``"ranks"``, and the ``"straggler"`` (rank, host, slowest shard)
        or None. Collective when distributed, like ``state_dict``: every process must call it (P25)."""
        summary = self._stats.summary()
        if self._boundary.tally is not None:
            summary["sources"] = self._boundary.tally.summary()  # this rank's samples received, per source
        if gather:
            summary.update(gather_rank_stats(summary, self._stats.slowest_open(), self._boundary.topology(),
                                             self.streaming.options.reads, self._shard_name))
        return summary

    def _shard_name(self, shard_index: int) -> str | None:
        """The name of shard ``shard_index`` (None for a mixture: its indices are per source)."""
        return self.streaming.source.shard_name(shard_index)


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


_warned_methods: set[str] = set()


def _warn_no_ring(method: str) -> None:
    """Once per start method and process: workers that are not forked cannot inherit the shared
    batch ring (X5), so every batch is pickled through the DataLoader's pipe instead (3-4x
    slower for large batches, e.g. token blocks). Some libraries switch the whole process to
    spawn (``multiprocessing.set_start_method("spawn", force=True)``) without saying so."""
    if method in _warned_methods:
        return
    _warned_methods.add(method)
    log.warning("DataLoader workers start with %r, not fork: batches go through pipes instead of the "
                "shared batch ring (specs/batch-transport.md X5), several times slower for large batches; "
                "pass ShardLoader(..., multiprocessing_context='fork') where the platform allows it", method)
