"""The resume check in global order, and which check a loaded state arms (specs/resume-state.md
R25-R29; the default order's is loader/resume_check.py, R18-R23).

A global-order state is one position of the epoch's sequence (P31): it has no consumers of its
own, so it promises what the sequence holds there — the head of the global batch that begins at
``position`` under the saving plan's ``B_g`` and tail (``global_batch_head``, R25), the same on
every topology. After a load, each consumer of this rank must deliver the first batch the state
re-planned on this topology gives it (R26: ``plan_head`` of the iteration's own plan), and the
promise must be what the state's sequence holds at its position (R27, the analogue of R20).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shardkit.errors import StateError
from shardkit.loader.resume_check import (
    HEAD,
    NEXT_KEY,
    NEXT_VERSION,
    REPLANNED,
    SLOTS,
    Head,
    ResumeCheck,
    check_part_header,
    next_part,
    read_next_part,
    window_head,
)
from shardkit.loader.topology import Topology
from shardkit.plan.global_order.order import GlobalOrderPlan
from shardkit.plan.global_order.state import is_global_state
from shardkit.plan.params import MAX_INT, PlanParams
from shardkit.plan.tokens.global_blocks import GlobalTokenPlan

if TYPE_CHECKING:
    from shardkit.loader.dataset import StreamingDataset

GLOBAL_KEY = "global_batch"  # a global-order state's promise: the next global batch's head (R25)


def global_batch_head(plan: GlobalOrderPlan, position: int, params: PlanParams | None = None) -> Head:
    """R25: the plan ids of the first ``min(HEAD, B_g)`` rows (P28) of the global batch that begins
    at ``position`` of ``plan``'s sequence, under ``params``' ``B_g`` and tail (default: the
    plan's); ``()`` when none begins there. Topology-free: only the sequence, the position, ``B_g``
    and the tail decide it. Cost: one global batch's rows."""
    at = GlobalOrderPlan(plan.shard_sizes, params or plan.params, plan.sequence, plan.sequence_params, position)
    if not at.num_global_batches:
        return ()
    rows = at.global_batch_rows(0)[:HEAD]
    return tuple(int(i) for i in rows.global_indices(at.shard_offsets).tolist())


def token_batch_head(plan: GlobalTokenPlan, position: int) -> Head:
    """R29: ``block_head`` of the global batch of token blocks that begins at stream position
    ``position`` of ``plan``'s stream under its ``B_g``, ``seq_len`` and tail — the ``(document,
    offset)`` of the first position of each of its first ``min(HEAD, B_g)`` blocks (``(-1, 0)``
    for a padding block, TB32), flattened; ``()`` when none begins there. Topology-free: only
    the stream, the position, ``B_g``, ``seq_len`` and the tail decide it. Cost: locating
    ``min(HEAD, B_g)`` positions."""
    total, left = plan.index.total, plan.index.total - position
    if left <= 0 or (plan.params.tail == "drop" and left < plan.global_positions):
        return ()
    return window_head(plan.index.locate, position, total, plan.params.global_batch_size, plan.options.seq_len)


# ---- the state's "next" part, by the plan's order ------------------------------------------------
def wants_heads(plan: Any) -> bool:
    """Whether ``state_dict()`` gathers per-consumer heads for ``plan`` (R18; not global order, R25)."""
    return not isinstance(plan, GlobalOrderPlan | GlobalTokenPlan)


def state_digest(plan: Any, state: dict[str, Any], rows: Sequence[Sequence[int]], unit: str) -> dict[str, Any] | None:
    """The loader state's ``next``: per consumer from the gathered ``rows`` (R18), or in global order
    the head of the global batch at the state's position (R25; of token blocks, R29). A
    global-order state of another plan kind (none today) has no promise: None, checked by R26 alone."""
    if isinstance(plan, GlobalOrderPlan | GlobalTokenPlan):
        at = int(state["position"])
        head = global_batch_head(plan, at) if isinstance(plan, GlobalOrderPlan) else token_batch_head(plan, at)
        return {"version": NEXT_VERSION, "unit": unit, GLOBAL_KEY: list(head)}
    return None if is_global_state(state) else next_part(rows, unit)


def read_promise(part: Any, plan: dict[str, Any], unit: str) -> list[Head] | None:
    """The promise of a loader state's ``next``, its shape checked by the plan state's order
    (R14, R18, R25, R29; ``StateError`` naming the path): per consumer, or in global order one
    head, returned as a list of it. None for a state without ``next`` (R23)."""
    if not is_global_state(plan):
        return read_next_part(part, plan, unit)
    if part is None:
        return None
    check_part_header(part, GLOBAL_KEY, unit, " (a global-order state's promise, R25, R29)")
    head = part[GLOBAL_KEY]
    # samples: up to HEAD plan ids (R25); tokens: up to HEAD (document, offset) pairs (R29)
    most, width, low, what = ((SLOTS, 2, -1, f"(document, offset) pairs, {SLOTS} ints") if unit == "tokens"
                              else (HEAD, 1, 0, "ints"))
    if (not isinstance(head, list) or len(head) > most or len(head) % width
            or not all(type(v) is int and low <= v <= MAX_INT for v in head)):
        raise StateError(f"loader state: '{NEXT_KEY}.{GLOBAL_KEY}' must be a list of at most {HEAD} {what}, "
                         f"in {low}..2**63-1, got {head!r:.100}")
    return [tuple(head)]


def loaded_check(mode: str, plan: dict[str, Any], epoch: int, promise: list[Head] | None, unit: str) -> ResumeCheck:
    """The check a loaded plan state arms: R25-R27 in global order, R19-R20 otherwise."""
    kind = GlobalResumeCheck if is_global_state(plan) else ResumeCheck
    return kind(mode, plan, epoch, promise, unit)


# ---- the check after a load ----------------------------------------------------------------------
class GlobalResumeCheck(ResumeCheck):
    """R26: each consumer of this rank against the re-plan; R27: the promise against the sequence."""

    promise_rule = "R27"

    def expect(self, streaming: StreamingDataset, topology: Topology, plan: Any, heads: dict[int, Head]) -> None:
        self.pending = {c: (head, REPLANNED) for c, head in heads.items()}
        if self.promise is not None and isinstance(plan, GlobalOrderPlan | GlobalTokenPlan):
            self.broken = self._broken(streaming, plan)

    def _broken(self, streaming: StreamingDataset, plan: GlobalOrderPlan | GlobalTokenPlan) -> list[str]:
        """The saving plan rebuilt at the state's position — its params over the re-plan's
        sequence, which the state's ``sequence`` fixed (P29); of token blocks, the plan that saved
        it, with its ``seq_len`` (R29) — against the promise (R27)."""
        params = PlanParams.from_dict(self.loaded["params"])
        position = int(self.loaded["position"])
        if isinstance(plan, GlobalOrderPlan):
            got, size = global_batch_head(plan, position, params), f"{params.global_batch_size} samples"
        else:
            saved = streaming.batching.saved_plan(streaming.source, self.loaded)
            if not isinstance(saved, GlobalTokenPlan):
                return []
            got = token_batch_head(saved, position)
            size = f"{params.global_batch_size} blocks of {saved.options.seq_len}"
        promised = (self.promise or [()])[0]
        if got == promised:
            return []
        return [f"its next global batch (position {position}, {size}) promised "
                f"{self.unit} {list(promised)}, but the state's sequence there gives {list(got)}"]
