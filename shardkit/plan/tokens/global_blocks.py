"""Token blocks in global order: the same global batches of blocks on every topology
(specs/token-blocks.md TB30-TB34; the sample version is specs/partition.md P27-P35). Pure.

An epoch is one token **stream**: the documents of the one-consumer epoch order (TB11), their
input positions concatenated (TB2, ``concat`` mode only). From stream position ``start`` on it
is cut into blocks of ``L`` positions, block ``j`` holding positions ``start + j*L …``; global
batch ``g`` is blocks ``g*B_g … (g+1)*B_g - 1`` (``B_g = world_size * batch_size``), rank ``r``
taking blocks ``r*B … (r+1)*B - 1`` of each, and a rank's workers take the global batches in
units of ``group`` (P30's deal). A consumer's work is the concatenation of its block ranges:
each is a whole number of blocks, so its cutter cuts exactly the stream's blocks (TB31). The
resume state is one stream position (TB33, ``plan/global_order/state.py``'s shape).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from shardkit.errors import PlanError, StateError
from shardkit.plan.global_order.order import Dealing
from shardkit.plan.global_order.state import check_global_state_shape, received_global_batches
from shardkit.plan.params import PlanParams
from shardkit.plan.plan import Plan
from shardkit.plan.state import STATE_VERSION
from shardkit.plan.tokens.blocks import BlockOptions
from shardkit.plan.tokens.config import TokenBlocks
from shardkit.plan.tokens.index import EpochIndex
from shardkit.plan.tokens.pieces import Pieces
from shardkit.plan.tokens.plan import epoch_index, order_plan, single_params
from shardkit.plan.tokens.pool import ConsumerWork

__all__ = ["GlobalTokenPlan", "build_global_token_plan", "global_token_state", "stream_params"]


def stream_params(params: PlanParams) -> PlanParams:
    """What fixes an epoch's token stream (TB30): one consumer, batch 1 (TB11's order), saved
    in the state as ``sequence`` (order ``"global"``, spread 1)."""
    return replace(single_params(params), spread=1, order="global")


class GlobalTokenPlan(Dealing):
    """Which blocks of which global batches each consumer yields, for one epoch from ``start``.
    Duck-compatible with :class:`TokenPlan` where the loader counts steps (``params``,
    ``start_offsets``, ``num_consumers``, ``num_batches``, ``steps_per_rank``)."""

    def __init__(self, params: PlanParams, index: EpochIndex, order: Plan, stream: PlanParams, start: int,
                 group: int, options: BlockOptions) -> None:
        if params.order != "global" or options.mode != "concat":
            raise PlanError(f"a global-order token plan needs order 'global' and mode 'concat', got "
                            f"{params.order!r}, {options.mode!r}")
        if isinstance(group, bool) or not isinstance(group, int) or group < 1:
            raise PlanError(f"group (batches per transfer): expected an int >= 1, got {group!r}")
        if not 0 <= start <= index.total:
            raise StateError(f"state.position: expected 0..{index.total} (the epoch's token positions), got {start}")
        self.params, self.index, self.order, self.stream = params, index, order, stream
        self.start, self.group, self.options = int(start), group, options
        left, per = index.total - self.start, self.global_positions
        # global batches of this plan; every rank yields a slice of each (P30)
        self.steps_per_rank = self.num_global_batches = left // per if params.tail == "drop" else -(-left // per)
        self.num_consumers = params.num_consumers

    # ---- counts ------------------------------------------------------------------------------------
    @property
    def global_positions(self) -> int:
        """Stream positions per global batch: ``B_g × L``."""
        return self.params.global_batch_size * self.options.seq_len

    @property
    def start_offsets(self) -> tuple[int, ...]:
        """Always 0: a resume moves ``start`` instead (TB33)."""
        return (0,) * self.num_consumers

    @property
    def end(self) -> int:
        """The stream position after the last global batch's real positions."""
        return min(self.start + self.steps_per_rank * self.global_positions, self.index.total)

    @property
    def num_dropped(self) -> int:
        """Positions of the drop tail (TB32): the stream after the last whole global batch."""
        return self.index.total - self.end

    @property
    def dropped(self) -> Pieces:
        return self.index.cut(self.end, self.index.total)

    # ---- blocks ------------------------------------------------------------------------------------
    def block_range(self, global_batch: int, rank: int) -> tuple[int, int]:
        """Stream positions of rank ``rank``'s blocks of global batch ``global_batch``."""
        batch, length = self.params.batch_size, self.options.seq_len
        begin = self.start + global_batch * self.global_positions + rank * batch * length
        return begin, begin + batch * length

    def consumer_ranges(self, consumer: int, first: int = 0, count: int | None = None) -> list[tuple[int, int]]:
        """Stream positions of consumer ``consumer``'s batches ``first … first + count - 1``."""
        rank, _ = self.rank_worker(consumer)
        stop = self.num_batches(consumer) if count is None else min(first + count, self.num_batches(consumer))
        return [self.block_range(self.global_batch_index(consumer, j), rank) for j in range(first, stop)]

    def consumer_work(self, consumer: int, first: int = 0, count: int | None = None) -> ConsumerWork:
        """Consumer ``consumer``'s pieces of its batches ``first …`` (``count`` of them, default
        all): its block ranges' in order (past the stream's end, none: the cutter pads, TB32),
        each a whole number of blocks (TB31)."""
        ranges = self.consumer_ranges(consumer, first, count)
        cuts = [self.index.cut(lo, hi) for lo, hi in ranges]
        pieces = Pieces(*(np.concatenate([getattr(c, k) for c in cuts]) if cuts else np.zeros(0, dtype=np.int64)
                          for k in ("doc", "start", "stop")))
        return ConsumerWork(pieces, len(ranges) * self.params.batch_size)

    def chunks(self, consumer: int, span: int) -> list[tuple[int, int]]:
        """Consumer ``consumer``'s batches as ``(first, count)`` runs of whole units (P30) whose
        stream span is at most about ``span`` positions (one unit at least): what a consumer
        holds the documents of at a time (TB34)."""
        unit_span = self.params.workers_per_rank * self.group * self.global_positions
        count = self.group * max(1, span // max(unit_span, 1))
        total = self.num_batches(consumer)
        return [(first, min(count, total - first)) for first in range(0, total, count)]


def build_global_token_plan(shard_sizes: Sequence[int] | np.ndarray, lengths: Any, params: PlanParams,
                            blocks: TokenBlocks, resume: dict[str, Any] | None = None, group: int = 1,
                            order_of: Callable[[PlanParams], Plan] | None = None) -> GlobalTokenPlan:
    """The global-order token plan of ``params.epoch``: from its start, or from a saved state's
    stream position on this topology, global batch size and ``seq_len`` (TB33). ``order_of``: the
    one-consumer plan of a weighted dataset's or a mixture's epoch order (TB15, SW11)."""
    if blocks.mode != "concat":
        raise PlanError("token blocks in global order: only mode='concat' is supported (TB34)")
    if resume is None:
        stream, start = stream_params(params), 0
    else:
        check_global_state_shape(resume)
        stream, start = PlanParams.from_dict(resume["sequence"]), int(resume["position"])
        if stream.epoch != params.epoch:
            raise StateError(f"resume state is for epoch {stream.epoch}, but the plan asked for epoch "
                             f"{params.epoch}; resume that epoch first, later epochs start fresh")
    root = replace(stream, order="shard")  # the order plan is the default order's one consumer (TB11)
    order = order_plan(shard_sizes, root) if order_of is None else order_of(single_params(root))
    index = epoch_index(shard_sizes, lengths, root, order, blocks, order_of is not None)
    return GlobalTokenPlan(params, index, order, stream, start, group, blocks.block_options())


def global_token_state(plan: GlobalTokenPlan, offsets: Sequence[int], fingerprint: str,
                       rank: int | None = None) -> dict[str, Any]:
    """The plan state after consumer ``c`` delivered ``offsets[c]`` blocks: the stream position of
    the next global batch (TB33), refused unless every rank received the same global batches in
    order (P31's rule)."""
    if not isinstance(fingerprint, str):
        raise StateError(f"fingerprint: expected a str, got {type(fingerprint).__name__}")
    received = received_global_batches(plan, list(offsets), rank)
    position = min(plan.start + received * plan.global_positions, plan.index.total)
    return {"version": STATE_VERSION, "fingerprint": fingerprint, "order": "global",
            "params": plan.params.to_dict(), "sequence": plan.stream.to_dict(), "position": position}
