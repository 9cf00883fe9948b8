"""The loader state of a ``ShardLoader``: what it saves (``state_dict``), how it restores
(``load_state_dict``) and the checks a state passes first (G5, G6 in docs/guarantees.md).

Loader state (specs/resume-state.md §Loader)::

    {"version": 1, "kind": "shardkit.loader", "epoch": int, "steps": int,
     "plan": <plan state: fingerprint, params, offsets per consumer, parent>}

plus the keys the kind of dataset adds (a mixture's, sample weights', token blocks').
``state_dict()`` is collective when ``torch.distributed`` is initialized with world size > 1:
every rank must call it at the same step; all get the same global state. With a data-parallel
group (loader/data_parallel.py) it gathers over every process and checks the replicas of each
data-parallel rank agree (P24, loader/replicas.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from shardkit.errors import StateError
from shardkit.loader.audit_sink import AUDIT_STEP_KEY, AuditSink
from shardkit.loader.epochs import EpochCursor
from shardkit.loader.mixture_state import SourceTally
from shardkit.loader.replicas import gather_by_dp_rank
from shardkit.loader.topology import Topology, rank_and_world
from shardkit.plan import validate_state
from shardkit.plan.params import MAX_INT
from shardkit.plan.state import check_state_shape
from shardkit.read.audit_lines import SINK_WRITER

if TYPE_CHECKING:
    from shardkit.loader.dataset import StreamingDataset

LOADER_STATE_VERSION = 1
LOADER_STATE_KIND = "shardkit.loader"


class StatefulLoader:
    """The ``Stateful`` part of ``ShardLoader`` (loader/shard_loader.py), which mixes it in and
    sets the attributes declared here: the consumed boundary of the iteration under way
    (``_offsets`` per consumer, ``_steps``) and the plan it runs (``_iter_topology``,
    ``_iter_resume``), or a loaded plan state for the next one (``_resume``)."""

    streaming: StreamingDataset
    num_workers: int
    _offsets: dict[int, int]
    _steps: int
    _iter_topology: Topology | None
    _iter_resume: dict[str, Any] | None
    _resume: dict[str, Any] | None
    _tally: SourceTally | None
    _cursor: EpochCursor
    _audit: AuditSink | None

    def planned_drops(self) -> np.ndarray:  # ShardLoader's (loader/shard_loader.py)
        raise NotImplementedError

    def _topology(self) -> Topology:
        rank, world = rank_and_world(self.streaming.options.rank, self.streaming.options.world_size)
        return Topology(rank, world, 0, self.num_workers)

    def consumed_snapshot(self) -> tuple[dict[int, int], int]:
        """This rank's consumed offsets and step count right now (cheap, local; see ``state_dict``)."""
        return dict(self._offsets), self._steps

    def rewind(self, snapshot: tuple[dict[int, int], int]) -> None:
        """Take the consumed boundary back to ``snapshot`` (from ``consumed_snapshot``) in the
        iteration under way: batches handed over since then were a look-ahead the loop never
        used (``DevicePrefetcher``'s staged batch); an abandoned iteration continues there (R10)."""
        offsets, steps = snapshot
        self._offsets.update(offsets)
        if self._audit is not None:
            self._audit.rewind(self._steps - steps)
        self._steps = steps

    def state_dict(self, snapshot: tuple[dict[int, int], int] | None = None) -> dict[str, Any]:
        """The global consumed offsets; collective across ranks when distributed (G5).

        ``snapshot`` (from ``consumed_snapshot``) states an earlier boundary, e.g. the one before a
        batch a device prefetcher has staged but the training loop has not received yet."""
        consumed, steps = snapshot if snapshot is not None else (self._offsets, self._steps)
        audit = {} if self._audit is None else {AUDIT_STEP_KEY: self._audit.step - (self._steps - steps)}
        topology = self._iter_topology or self._topology()
        resume = self._iter_resume if self._iter_topology else self._resume
        epoch = self.streaming.epoch
        plan = self.streaming.step_plan(epoch, topology.world_size, self.num_workers, resume)
        offsets = list(plan.start_offsets)
        for consumer, position in consumed.items():
            offsets[consumer] = position
        offsets, steps = self._gather_boundary(offsets, steps, topology)
        received = None if self._tally is None else self._gather_received(self._tally.at(consumed), topology)
        extra = self.streaming.state_part(epoch, resume, received)  # a mixture's or weights' part
        return {
            "version": LOADER_STATE_VERSION,
            "kind": LOADER_STATE_KIND,
            "epoch": epoch,
            "steps": steps,
            "plan": self.streaming.plan_state(plan, offsets, epoch),
            **extra,
            **self.streaming.extra_state(plan, offsets),
            **audit,  # the run's step count, for the audit sink (R15)
        }

    def _gather_boundary(self, offsets: list[int], steps: int, topology: Topology) -> tuple[list[int], int]:
        """Every data-parallel rank's offsets for its own consumers, combined, and data-parallel
        rank 0's steps (all_gather over every process, replicas checked: P24; no pickling)."""
        width = max(self.num_workers, 1)
        lo = topology.rank * width
        rows = gather_by_dp_rank([steps, *offsets[lo : lo + width]], topology, self.streaming.options.reads,
                                 "consumed steps and offsets")
        return [x for row in rows for x in row[1:]], rows[0][0]

    def _gather_received(self, counts: np.ndarray, topology: Topology) -> np.ndarray:
        """The per-source counts of the data-parallel ranks summed, one replica each (MX9, P24)."""
        rows = gather_by_dp_rank([int(n) for n in counts], topology, self.streaming.options.reads,
                                 "per-source counts")
        return np.asarray(rows, dtype=np.int64).reshape(len(rows), len(counts)).sum(axis=0)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the saved consumed boundary at the next ``iter(loader)`` — on any topology."""
        check_loader_state(state, None)  # its shape first (L5), then the dataset's part (a mixture's)
        check_loader_state(state, self.streaming.load_state_part(state))
        self.streaming.set_epoch(int(state["epoch"]))
        self._resume = state["plan"]
        self._offsets, self._steps, self._iter_topology = {}, 0, None
        self._cursor.chosen()
        if self._audit is not None:  # the steps of the run the state holds (R15)
            self._audit.resumed(state.get(AUDIT_STEP_KEY))
        if self._nothing_left(self._resume):  # saved at the end of its epoch: the next one follows (R10)
            self._cursor.restored_ended(self.streaming.epoch)

    def audit_resumed(self, step: int) -> None:
        """With ``audit_dir=``: this launch resumed after ``step`` steps of the run (the trainer's
        count), for a state saved without ``audit_dir`` (R15); a state saved with it says so itself."""
        if self._audit is None:
            raise ValueError("audit_resumed() is for a ShardLoader made with audit_dir=")
        self._audit.resumed(step)

    @property
    def audit_run(self) -> int | None:
        """With ``audit_dir=``: this launch's run number (R15), from its first ``iter(loader)`` on."""
        return None if self._audit is None else self._audit.run

    def _audit_info(self, topology: Topology) -> dict[str, Any]:
        """What ``runNNN.json`` records besides ``resumed_from_step`` (the token settings: TB1)."""
        params = self.streaming.params
        info: dict[str, Any] = {"writer": SINK_WRITER, "world_size": topology.world_size, "workers": self.num_workers,
                                "batch_size": params.batch_size, "seed": params.seed}
        tokens = getattr(self.streaming, "tokens", None)
        if self.streaming.yields_tokens and tokens is not None:
            info["tokens"] = {"field": tokens.field, "mode": tokens.mode, "bos_id": tokens.bos_id,
                              "eos_id": tokens.eos_id}
        return info

    def _audit_batch(self, batch: Any) -> None:
        """The audit line of a batch handed to the loop; rank 0 first names its plan's drops (R3)."""
        sink, tokens = self._audit, self.streaming.yields_tokens
        if sink is None:
            return
        if self._steps == 1 and sink.writes_run_file and not tokens:
            sink.iteration(self.streaming.epoch, [int(i) for i in self.planned_drops().tolist()])
        sink.batch(self.streaming.epoch, batch, tokens)

    def _nothing_left(self, resume: dict[str, Any]) -> bool:
        """Whether the epoch of plan state ``resume`` has no batch left for any consumer."""
        topology = self._topology()
        try:
            plan = self.streaming.step_plan(self.streaming.epoch, topology.world_size, self.num_workers, resume)
        except StateError:
            return False  # refused with its reason at the next iter(loader) (R9)
        batch = self.streaming.params.batch_size
        return all(plan.num_batches(c) == plan.start_offsets[c] // batch for c in range(plan.num_consumers))


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
    steps = state.get("steps", 0)
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= MAX_INT:
        raise StateError(f"loader state: 'steps' must be an int in 0..2**63-1, got {steps!r:.40}")
    check_state_shape(state["plan"])  # every level's types, ranges and caps, before any part is read (R14)
    params = state["plan"]["params"]
    if fingerprint is not None:
        validate_state(state["plan"], fingerprint)  # also refuses a malformed plan
    if params.get("epoch") != state["epoch"]:
        raise StateError("loader state: 'epoch' and plan params disagree")


