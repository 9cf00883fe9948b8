"""The resume check: a loader state says what each consumer's next batch holds, and the first
batch each consumer delivers after ``load_state_dict`` is checked (specs/resume-state.md R18-R23).

What a batch holds is named by its **head**, computed from the plan, never by reading data: the
plan ids (``batch["_index"]`` numbering of the plan) of its first ``HEAD`` samples, or for token
blocks the ``(document, offset)`` of the first position of its first ``HEAD`` blocks, flattened
(``(-1, 0)`` for a padding block). ``state_dict()`` records every consumer's next head under
``"next"`` (R18); after a load, each consumer of this rank is expected to deliver, as its first
batch, the head of the loaded state re-planned on this topology — on a same-topology resume the
one the state promised (R19); on an elastic resume the state's promise is checked against the
plan that saved it (R20). Cost: O(HEAD + one plan window) per consumer of this rank when a state
is saved or a resume checked; per batch only the ``is None`` test of a disarmed check (R22).
Global order promises one head for the epoch's sequence instead (R25-R29, loader/resume_global.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from shardkit.errors import PlanError, ResumeMismatchError, StateError
from shardkit.loader.token_batch import batch_blocks
from shardkit.loader.topology import Topology
from shardkit.loader.transfer.meta import BatchMeta
from shardkit.plan import Plan
from shardkit.plan.global_order.order import GlobalOrderPlan
from shardkit.plan.params import MAX_INT
from shardkit.plan.tokens.blocks import Block
from shardkit.plan.tokens.global_blocks import GlobalTokenPlan
from shardkit.plan.tokens.plan import TokenPlan

if TYPE_CHECKING:
    import numpy as np

    from shardkit.loader.dataset import StreamingDataset

log = logging.getLogger("shardkit.loader.shard_loader")
HEAD = 4  # samples (or blocks) of a batch its head names
NEXT_KEY = "next"  # the loader state's digest: {"version": 1, "unit": ..., "consumers": [[...], ...]}
NEXT_VERSION = 1
MODES = ("raise", "warn", "off")
Head = tuple[int, ...]


# ---- heads: from the plan (expected) and from a worker's cut (delivered) -----------------------------
def cut_head(indices: np.ndarray) -> Head:
    """The head of a batch of samples with plan ids ``indices`` (what the worker cut)."""
    return tuple(int(i) for i in indices[:HEAD].tolist())


def block_head(blocks: Sequence[Block]) -> Head:
    """The head of a batch of token blocks: (document, offset) of each block's first position."""
    out: list[int] = []
    for block in blocks[:HEAD]:
        first = block.pieces[0] if block.pieces else None
        out += [-1, 0] if first is None else [int(first.doc_index), int(first.start)]
    return tuple(out)


def window_head(locate: Callable[[int], tuple[int, ...]], begin: int, end: int, count: int, seq_len: int) -> Head:
    """``block_head`` of ``count`` blocks of ``seq_len`` positions cut from ``begin`` on, where
    positions from ``end`` on are padding (``(-1, 0)``): ``locate(at)`` gives the (document,
    offset) of a real position ``at``."""
    out: list[int] = []
    for r in range(min(HEAD, count)):
        at = begin + r * seq_len
        out += [-1, 0] if at >= end else [int(v) for v in locate(at)[:2]]
    return tuple(out)


def plan_head(plan: Any, consumer: int, position: int, reported: dict[str, Any] | None = None) -> Head | None:
    """The head of consumer ``consumer``'s batch at ``position`` of ``plan`` (``()``: it has no
    batch there; None: a plan whose heads this module cannot derive, e.g. another plan kind).
    ``reported``: token blocks, the cutter state the consumer reported there (TB28: no replay)."""
    if isinstance(plan, TokenPlan):
        if position >= plan.num_batches(consumer) * plan.params.batch_size:
            return ()
        work = plan.level.split.consumers[consumer]
        state = plan.state_at(consumer, position, reported)
        for blocks, _ in batch_blocks(work, plan.level.options, plan.params.batch_size, state):
            return block_head(blocks)
        return ()
    if isinstance(plan, GlobalTokenPlan):  # global order's token blocks: its batch there (R26, TB31)
        batch = plan.params.batch_size
        if position >= plan.num_batches(consumer) * batch:
            return ()
        for blocks, _ in batch_blocks(plan.consumer_work(consumer, position // batch, 1), plan.options, batch, None):
            return block_head(blocks)
        return ()
    if isinstance(plan, Plan | GlobalOrderPlan):  # global order: its rows of its global batches (R26)
        batch = plan.params.batch_size
        stop = min(position + min(HEAD, batch), plan.num_batches(consumer) * batch)
        ids: list[int] = []
        if stop > position:
            for window in plan.consumer_windows(consumer, position):
                ids += window.global_indices(plan.shard_offsets)[: stop - position - len(ids)].tolist()
                if len(ids) >= stop - position:
                    break
        return tuple(int(i) for i in ids)
    return None


def unit_of(streaming: StreamingDataset) -> str:
    return "tokens" if streaming.yields_tokens else "samples"


# ---- the state's "next" part ---------------------------------------------------------------------
SLOTS = 2 * HEAD  # ints per consumer in a gathered row, after its length


def head_row(heads: Sequence[Head | None]) -> list[int]:
    """``heads`` as fixed-width ints for the boundary's all_gather: per consumer its length (-1:
    undetermined) and ``SLOTS`` values."""
    row: list[int] = []
    for head in heads:
        values = list(head or ())
        row += [-1 if head is None else len(values), *values, *[0] * (SLOTS - len(values))]
    return row


def next_part(rows: Sequence[Sequence[int]], unit: str) -> dict[str, Any] | None:
    """The ``next`` part from the gathered ``head_row`` rows (None when a head is undetermined)."""
    consumers: list[list[int]] = []
    for row in rows:
        for at in range(0, len(row), SLOTS + 1):
            if row[at] < 0:
                return None
            consumers.append(list(row[at + 1 : at + 1 + row[at]]))
    return {"version": NEXT_VERSION, "unit": unit, "consumers": consumers}


def read_next_part(part: Any, plan: dict[str, Any], unit: str) -> list[Head] | None:
    """The promised head of every consumer of the state's plan, shape checked (``StateError``
    naming the path, R14); None for a state without one (saved before version 2, R23)."""
    if part is None:
        return None
    check_part_header(part, "consumers", unit)
    params = plan.get("params", {})
    wanted = int(params.get("world_size", 0)) * max(int(params.get("num_workers", 0)), 1)
    consumers = part["consumers"]
    if not isinstance(consumers, list) or len(consumers) != wanted:
        raise StateError(f"loader state: '{NEXT_KEY}.consumers' must list {wanted} heads (one per consumer "
                         f"of its plan), got {consumers!r:.100}")
    for c, head in enumerate(consumers):
        if (not isinstance(head, list) or len(head) > SLOTS
                or not all(type(v) is int and -1 <= v <= MAX_INT for v in head)):
            raise StateError(f"loader state: '{NEXT_KEY}.consumers[{c}]' must be a list of at most {SLOTS} "
                             f"ints in -1..2**63-1, got {head!r:.100}")
    return [tuple(head) for head in consumers]


def check_part_header(part: Any, key: str, unit: str, where: str = "") -> None:
    """The ``next`` part's keys (``key`` besides ``unit`` and ``version``), version and unit (R14)."""
    keys = sorted([key, "unit", "version"])
    if not isinstance(part, dict) or sorted(part) != keys:
        raise StateError(f"loader state: '{NEXT_KEY}' must be an object with keys {keys}{where}, "
                         f"got {part!r:.200}")
    if part["version"] != NEXT_VERSION or isinstance(part["version"], bool):
        raise StateError(f"loader state: '{NEXT_KEY}.version' is {part['version']!r:.40}; this shardkit "
                         f"reads {NEXT_VERSION}")
    if part["unit"] != unit:
        raise StateError(f"loader state: '{NEXT_KEY}.unit' is {part['unit']!r:.40}, this dataset yields {unit}")


# ---- the check after a load ----------------------------------------------------------------------
REPLANNED = "the loaded state re-planned on this topology"
PROMISED = "the loaded state's 'next': what its consumer's next batch held when it was saved"


class ResumeCheck:
    """Armed by ``load_state_dict`` (``mode`` "raise" or "warn"): the first batch each consumer
    of this rank delivers is checked against the loaded state (``plan``, ``epoch``, ``promise``)."""

    promise_rule = "R20"  # the rule a broken promise is reported under

    def __init__(self, mode: str, plan: dict[str, Any], epoch: int, promise: list[Head] | None, unit: str) -> None:
        self.mode, self.loaded, self.epoch, self.promise, self.unit = mode, plan, epoch, promise, unit
        self.pending: dict[int, tuple[Head, str]] | None = None  # consumer -> (head, why): set at begin()
        self.broken: list[str] = []  # the state's promises its own plan does not keep (R20, R27)
        self.started = False  # an iteration started from the loaded state
        self.width = 1

    def begin(self, streaming: StreamingDataset, topology: Topology, num_workers: int,
              resume: dict[str, Any] | None, group: int = 1) -> None:
        """An iteration starts with plan state ``resume``: the expectations, computed once (R19),
        from the plan the iteration builds when it continues the loaded state (``group``: the
        loader's batches per transfer, part of a global plan, R26)."""
        self.started = self.started or resume is self.loaded
        if self.pending is not None:
            return
        self.width = width = max(num_workers, 1)
        plan = streaming.step_plan(self.epoch, topology.world_size, num_workers, self.loaded, group)
        mine = range(topology.rank * width, (topology.rank + 1) * width)
        heads = {c: plan_head(plan, c, plan.start_offsets[c]) for c in mine}
        self.pending = {}
        if any(head is None for head in heads.values()):
            return  # a plan kind without heads: nothing is determined (R21)
        self.expect(streaming, topology, plan, {c: head or () for c, head in heads.items()})

    def expect(self, streaming: StreamingDataset, topology: Topology, plan: Any, heads: dict[int, Head]) -> None:
        """R19.1 on the saved plan, else R19.2 (``heads``: the re-plan's), and R20 elastically."""
        relation = _relation(streaming, plan, self.loaded, self.epoch)
        mine = list(heads)
        if relation == "same" and self.promise is not None:
            self.pending = {c: (self.promise[c], PROMISED) for c in mine}
        else:
            self.pending = {c: (head, REPLANNED) for c, head in heads.items()}
        if relation == "elastic" and self.promise is not None:
            self.broken = self._broken_promises(streaming, topology)

    def _broken_promises(self, streaming: StreamingDataset, topology: Topology) -> list[str]:
        """The saved consumers (those of the saved ranks this rank stands for) whose promised head
        is not the head the plan that saved the state gives at its offsets (R20)."""
        promise = self.promise or []
        saved = streaming.batching.saved_plan(streaming.source, self.loaded)
        old_width = max(int(self.loaded["params"]["num_workers"]), 1)
        out = []
        for c, promised in enumerate(promise):
            if (c // old_width) % topology.world_size != topology.rank:
                continue
            got = plan_head(saved, c, saved.start_offsets[c])
            if got is not None and got != promised:
                out.append(f"saved consumer {c} (rank {c // old_width}, worker {c % old_width}) promised "
                           f"{self.unit} {list(promised)}, but the state's plan at its offset "
                           f"{saved.start_offsets[c]} gives {list(got)}")
        return out

    def done(self) -> bool:
        return self.pending is not None and not self.broken and not any(h for h, _ in self.pending.values())

    def delivered(self, meta: BatchMeta) -> bool:
        """Consumer ``meta.consumer`` delivered a batch; whether the check is complete."""
        if self.pending is None:
            return False
        expected = self.pending.pop(meta.consumer, None)
        where = self._where(meta.consumer)
        self._report_broken(f"{where} delivered {self.unit} {list(meta.head)} first")
        if expected is not None and expected[0] != meta.head:
            want = list(expected[0]) if expected[0] else "no batch"
            self._report(f"resume check (R19): {where} delivered {self.unit} {list(meta.head)} as its first "
                         f"batch after load_state_dict(), expected {want} ({expected[1]}, epoch {self.epoch}); "
                         f"the state loaded is not the one this iteration continued (set_epoch() of another "
                         f"epoch, a restart, or a state edited or of another run?)")
        return self.done()

    def ended(self) -> None:
        """The iteration ran to its end: a consumer expected to deliver that did not is a mismatch,
        and a broken promise no delivered batch reported is reported now."""
        self._report_broken("this rank delivered no batch")
        missing = {c: h for c, (h, _) in (self.pending or {}).items() if h}
        for c, head in sorted(missing.items()):
            self._report(f"resume check (R19): {self._where(c)} delivered no batch after load_state_dict(), "
                         f"expected {self.unit} {list(head)} (epoch {self.epoch})")

    def _report_broken(self, delivered: str) -> None:
        if self.broken:
            broken, self.broken = self.broken, []
            self._report(f"resume check ({self.promise_rule}): the loaded state of epoch {self.epoch} is not the "
                         f"state its own digest describes (edited, or not the one saved?): {'; '.join(broken)}; "
                         f"{delivered}")

    def _where(self, consumer: int) -> str:
        return f"consumer {consumer} (rank {consumer // self.width}, worker {consumer % self.width})"

    def _report(self, message: str) -> None:
        report(self.mode, message)


def report(mode: str, message: str) -> None:
    """Raise ``ResumeMismatchError`` ("raise") or log a warning ("warn")."""
    if mode == "raise":
        raise ResumeMismatchError(message)
    log.warning("shardkit: %s", message)


def _relation(streaming: StreamingDataset, plan: Any, loaded: dict[str, Any], epoch: int) -> str:
    """How ``plan`` (built from ``loaded`` on this topology) stands to the plan that saved it:
    "same" (R2: the saved plan at its offsets), "elastic" (R3: its remainder re-partitioned) or
    "replanned" (neither, e.g. a mixture's rest re-cut under new weights, MX12)."""
    try:
        if streaming.plan_state(plan, list(plan.start_offsets), epoch) == loaded:
            return "same"
    except (StateError, PlanError):
        pass
    return "elastic" if getattr(plan, "parent_state", None) == loaded else "replanned"
