"""The consumed boundary of a ``ShardLoader``: what the training loop has received, and what the
next iteration reads (G5, G6 in docs/guarantees.md; specs/resume-state.md L1, R10).

``ConsumedBoundary`` is the loader's ``Stateful`` half, owned by ``ShardLoader`` (composition):
per global consumer the position of the last batch the loop received in the iteration under way,
the steps this rank took, the plan state that iteration runs from, a loaded state waiting for the
next one, the epoch cursor (R10), a mixture's per-source tally (MX9) and the audit sink (R15).
It knows the dataset only through ``StreamingDataset``'s component-neutral methods
(``step_plan``, ``plan_state``, ``state_part``, ``load_state_part``): no kind of dataset has a
branch here.

``state_dict()`` is collective when ``torch.distributed`` is initialized with world size > 1:
every rank must call it at the same step; all get the same global state. With a data-parallel
group (loader/data_parallel.py) it gathers over every process and checks the replicas of each
data-parallel rank agree (P24, loader/replicas.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from shardkit.errors import StateError
from shardkit.loader.audit_sink import AuditSink
from shardkit.loader.epochs import EpochCursor
from shardkit.loader.loader_state import LoaderState
from shardkit.loader.replicas import gather_by_dp_rank
from shardkit.loader.resume_check import ResumeCheck, head_row, plan_head, report, unit_of
from shardkit.loader.resume_global import loaded_check, read_promise, state_digest, wants_heads
from shardkit.loader.token_cursors import CursorBook
from shardkit.loader.topology import Topology, rank_and_world
from shardkit.loader.transfer.meta import BatchMeta
from shardkit.plan.any_state import validate_any_state
from shardkit.read.audit_lines import SINK_WRITER

if TYPE_CHECKING:
    from shardkit.loader.dataset import StreamingDataset

log = logging.getLogger("shardkit.loader.shard_loader")
Snapshot = tuple[dict[int, int], int]  # consumed offsets per consumer, steps


class ConsumedBoundary:
    """The consumed boundary of one ``ShardLoader`` over ``streaming`` with ``num_workers``."""

    def __init__(self, streaming: StreamingDataset, num_workers: int, audit: AuditSink | None,
                 group: int = 1, resume_check: str = "raise") -> None:
        self.streaming, self.num_workers = streaming, num_workers
        self.group = group  # batches per DataLoader item (X8): global order deals its batches by it (P30)
        self.offsets: dict[int, int] = {}  # consumer -> position received by the loop (L1)
        self.steps = 0
        self.iter_topology: Topology | None = None  # the iteration under way's topology and plan state
        self.iter_resume: dict[str, Any] | None = None
        self.resume: dict[str, Any] | None = None  # a loaded plan state, for the next iteration
        self.tally = streaming.new_tally()  # per-source samples received (mixtures, MX9)
        self.cursor = EpochCursor()  # which epoch the next iteration reads (R10)
        self.audit = audit
        self.generation = 0
        self.cursors = CursorBook()  # token blocks: the cutter states consumers reported (TB28)
        self.check_mode = resume_check  # R19-R22: "raise", "warn" or "off"
        self.check: ResumeCheck | None = None  # armed by load(), until each consumer's first batch
        self.expecting = False  # expect_resume(): the next iteration must continue a loaded state
        self.loaded = False  # a state was ever given to load()

    def topology(self) -> Topology:
        rank, world = rank_and_world(self.streaming.options.rank, self.streaming.options.world_size)
        return Topology(rank, world, 0, self.num_workers)

    # ---- epochs (R10) -----------------------------------------------------------------------------
    def set_epoch(self, epoch: int, drop_loaded: bool = False) -> None:
        if self.check is not None and epoch != self.streaming.epoch and (self.check.started or drop_loaded):
            self.check = None  # the loaded state was continued, or the caller drops it on purpose (R21)
        if self.resume is not None and epoch != self.streaming.epoch:
            if not self.cursor.advances(self.streaming.epoch):  # a finished epoch's state: no loss
                log.warning("set_epoch(%d) drops the loaded state of epoch %d", epoch, self.streaming.epoch)
            self.resume = None
        if epoch != self.streaming.epoch:
            self.offsets, self.steps, self.iter_topology = {}, 0, None
            self.cursors.clear()
        self.streaming.set_epoch(epoch)
        self.cursor.chosen()

    def next_iteration(self) -> tuple[int, dict[str, Any] | None]:
        """The epoch and plan state the next ``iter(loader)`` uses (R10), without side effects."""
        if self.cursor.advances(self.streaming.epoch):
            return self.streaming.epoch + 1, None
        if self.cursor.continues(self.streaming.epoch):
            return self.streaming.epoch, self._continuation()
        return self.streaming.epoch, self.resume

    def _continuation(self) -> dict[str, Any] | None:
        """The plan state of this rank's consumed boundary in the unfinished iteration (local: only
        this rank's consumers move, and the next iteration runs on the same topology)."""
        topology = self.topology()
        if self.iter_topology is None or topology != self.iter_topology:
            log.warning("the topology changed since the unfinished iteration; epoch %d restarts", self.streaming.epoch)
            return None
        plan = self._plan(self.streaming.epoch, topology, self.iter_resume)
        offsets = [self.offsets.get(c, start) for c, start in enumerate(plan.start_offsets)]
        return self.streaming.plan_state(plan, offsets, self.streaming.epoch, topology.rank)

    def _plan(self, epoch: int, topology: Topology, resume: dict[str, Any] | None, collective: bool = False) -> Any:
        return self.streaming.step_plan(epoch, topology.world_size, self.num_workers, resume, self.group,
                                        collective=collective)

    def current(self) -> tuple[int, dict[str, Any] | None]:
        """The epoch and plan state of the iteration under way, else of the next one."""
        if self.cursor.live and self.iter_topology is not None:
            return self.streaming.epoch, self.iter_resume
        return self.next_iteration()

    # ---- an iteration ------------------------------------------------------------------------------
    def start(self, topology: Topology, epoch: int, resume: dict[str, Any] | None) -> int:
        """An iteration of ``epoch`` from plan state ``resume`` begins; returns its generation."""
        self.resume = None
        self.streaming.set_epoch(epoch)
        plan = self._plan(epoch, topology, resume, collective=True)
        self.iter_topology, self.iter_resume = topology, resume
        self.offsets = dict(enumerate(plan.start_offsets))
        self.cursors.clear()
        if self.tally is not None:
            self.tally.reset(list(plan.start_offsets))
        self.steps = 0
        self.generation += 1
        self.cursor.started(self.generation, epoch)
        if self.audit is not None:  # collective: every process, readers or not
            self.audit.start(topology.rank, topology.world_size, self.streaming.options.reads,
                             self._audit_info(topology))
        self._begin_check(topology, epoch, resume)
        return self.generation

    def _begin_check(self, topology: Topology, epoch: int, resume: dict[str, Any] | None) -> None:
        """R21: a resume the caller announced (``expect_resume``) needs a loaded state; R19: the
        loaded state's expectations for this rank's consumers (computed once)."""
        if self.expecting and not self.loaded and self.check_mode != "off":
            self.expecting = False
            report(self.check_mode, f"resume check (R21): expect_resume() was called, but no state was ever loaded "
                                    f"with load_state_dict(); epoch {epoch} is read from "
                                    f"{'its start' if resume is None else 'the unfinished iteration'}")
        self.expecting = False
        if self.check is not None and self.streaming.options.reads:
            self.check.begin(self.streaming, topology, self.num_workers, resume, self.group)
            if self.check.done():
                self.check = None

    def ended(self, generation: int) -> None:
        """Iteration ``generation`` ran to its end (R10); a pending check ends with it (R19)."""
        self.cursor.ended(generation)
        check, self.check = self.check, None
        if check is not None and check.pending is not None:
            check.ended()

    def received(self, batch: Any, meta: BatchMeta | None) -> None:
        """The loop received ``batch`` (its ``BatchMeta`` taken out): the boundary moves (L1)."""
        if self.check is not None and (meta is None or self.check.delivered(meta)):
            self.check = None  # R22: from here on one ``is None`` test per batch
        if meta is not None:
            self.offsets[meta.consumer] = meta.position
            if meta.cursor:  # token blocks only (TB28)
                self.cursors.record(meta)
        if self.tally is not None:
            self.tally.record(batch, meta)
        self.steps += 1
        if self.audit is not None:
            tokens = self.streaming.yields_tokens
            if self.steps == 1 and self.audit.writes_run_file and not tokens:
                self.audit.iteration(self.streaming.epoch, [int(i) for i in self.planned_drops().tolist()])
            self.audit.batch(self.streaming.epoch, batch, tokens)

    def planned_drops(self) -> np.ndarray:
        topology = self.topology()
        epoch, resume = self.current()
        plan = self._plan(epoch, topology, resume)
        dropped = getattr(plan, "dropped_indices", None)
        if dropped is None:
            raise TypeError("planned_drops() is for sample plans; token blocks account for every "
                            "token (tools/audit_tokens.py)")
        result: np.ndarray = dropped()
        return result

    def _audit_info(self, topology: Topology) -> dict[str, Any]:
        """What ``runNNN.json`` records besides ``resumed_from_step`` (the token settings: TB1)."""
        params = self.streaming.params
        info: dict[str, Any] = {"writer": SINK_WRITER, "world_size": topology.world_size, "workers": self.num_workers,
                                "batch_size": params.batch_size, "seed": params.seed}
        tokens = self.streaming.tokens
        if tokens is not None:
            info["tokens"] = {"field": tokens.field, "mode": tokens.mode, "bos_id": tokens.bos_id,
                              "eos_id": tokens.eos_id}
        return info

    # ---- the state -------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return dict(self.offsets), self.steps

    def rewind(self, snapshot: Snapshot) -> None:
        offsets, steps = snapshot
        self.offsets.update(offsets)
        if self.audit is not None:
            self.audit.rewind(self.steps - steps)
        self.steps = steps

    def state(self, snapshot: Snapshot | None = None) -> LoaderState:
        """The global consumed boundary (collective across ranks when distributed, G5)."""
        consumed, steps = snapshot if snapshot is not None else (self.offsets, self.steps)
        audit = None if self.audit is None else self.audit.step - (self.steps - steps)
        topology = self.iter_topology or self.topology()
        resume = self.iter_resume if self.iter_topology else self.resume
        epoch = self.streaming.epoch
        plan = self._plan(epoch, topology, resume)
        offsets = list(plan.start_offsets)
        for consumer, position in consumed.items():
            offsets[consumer] = position
        heads = self._heads(plan, offsets, topology)
        offsets, steps, rows = self._gather_boundary(offsets, steps, topology, heads)
        received = None if self.tally is None else self._gather_received(self.tally.at(consumed), topology)
        extra = self.streaming.extra_state(plan, offsets, self._reported(offsets, topology))
        parts = {**self.streaming.state_part(epoch, resume, received), **extra}
        saved = self.streaming.plan_state(plan, offsets, epoch)
        digest = state_digest(plan, saved, rows, unit_of(self.streaming))  # R18, R25
        return LoaderState(epoch, steps, saved, parts, audit, next=digest)

    def _heads(self, plan: Any, offsets: list[int], topology: Topology) -> list[int]:
        """This rank's consumers' next heads at ``offsets``, from the plan (R18), as gather ints
        (none in global order: its promise is computed from the gathered position, R25)."""
        if not wants_heads(plan):
            return []
        width = max(self.num_workers, 1)
        mine = range(topology.rank * width, (topology.rank + 1) * width)
        if not self.streaming.options.reads:
            return head_row([()] * width)
        return head_row([plan_head(plan, c, offsets[c], self.cursors.state(c, offsets[c])) for c in mine])

    def _gather_boundary(self, offsets: list[int], steps: int, topology: Topology,
                         heads: list[int]) -> tuple[list[int], int, list[list[int]]]:
        """Every data-parallel rank's offsets for its own consumers, combined, data-parallel rank
        0's steps, and each rank's ``heads`` (one all_gather over every process, replicas checked:
        P24; no pickling)."""
        width = max(self.num_workers, 1)
        lo = topology.rank * width
        rows = gather_by_dp_rank([steps, *offsets[lo : lo + width], *heads], topology, self.streaming.options.reads,
                                 "consumed steps and offsets")
        return [x for row in rows for x in row[1 : 1 + width]], rows[0][0], [row[1 + width :] for row in rows]

    def _reported(self, offsets: list[int], topology: Topology) -> dict[int, Any] | None:
        """Token blocks: the cutter states consumers reported at ``offsets``, gathered (TB28)."""
        if not self.streaming.yields_tokens:
            return None
        return self.cursors.gather(offsets, topology, self.num_workers, self.streaming.options.reads)

    def _gather_received(self, counts: np.ndarray, topology: Topology) -> np.ndarray:
        """The per-source counts of the data-parallel ranks summed, one replica each (MX9, P24)."""
        rows = gather_by_dp_rank([int(n) for n in counts], topology, self.streaming.options.reads,
                                 "per-source counts")
        return np.asarray(rows, dtype=np.int64).reshape(len(rows), len(counts)).sum(axis=0)

    def load(self, raw: dict[str, Any]) -> None:
        """Validate ``raw`` once (its shape, then each component's part, then the plan's
        fingerprint), then plan from it at the next ``iter(loader)`` — on any topology."""
        state = LoaderState.from_dict(raw)
        validate_any_state(state.plan, self.streaming.load_state_part(state))  # the shape was checked by from_dict
        unit = unit_of(self.streaming)
        promise = read_promise(state.next, state.plan, unit)  # R18, R25; None in a version-1 state (R23)
        self.streaming.set_epoch(state.epoch)
        self.resume = state.plan
        self.offsets, self.steps, self.iter_topology = {}, 0, None
        self.cursors.clear()
        self.cursor.chosen()
        if self.audit is not None:  # the steps of the run the state holds (R15)
            self.audit.resumed(state.audit_step)
        self.loaded, self.check = True, None
        if self._nothing_left(self.resume):  # saved at the end of its epoch: the next one follows (R10)
            self.cursor.restored_ended(self.streaming.epoch)
        elif self.check_mode != "off":
            self.check = loaded_check(self.check_mode, self.resume, state.epoch, promise, unit)

    def _nothing_left(self, resume: dict[str, Any]) -> bool:
        """Whether the plan that saved ``resume`` had no batch left for any consumer: its epoch
        is done, on any topology (R10). Judged on the saving plan, not on this topology's re-plan,
        so an epoch-end state never runs the tail its plan dropped (R3's remainder is for an
        epoch still under way)."""
        try:
            plan = self.streaming.batching.saved_plan(self.streaming.source, resume)
        except StateError:
            return False  # refused with its reason at the next iter(loader) (R9)
        batch = int(resume["params"]["batch_size"])
        return all(plan.num_batches(c) == plan.start_offsets[c] // batch for c in range(plan.num_consumers))
