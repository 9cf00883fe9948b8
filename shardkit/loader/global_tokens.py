"""Token blocks in global order through the loader (specs/token-blocks.md TB30-TB34): the plan
of a source's token stream, the loader state's ``tokens`` part, and what a consumer reads.

The plan state is the global-order shape of specs/resume-state.md (R16: ``order``,
``sequence``, ``position``), ``position`` counting **token positions** of the epoch's stream;
the ``tokens`` part is the identity (TB8) with ``order: "global"`` and the ``seq_len`` the state
was saved with (what the saving plan is rebuilt with, R10's end-of-epoch test). No cutter
states: a stream position is the whole history (TB33).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from shardkit.errors import PlanError, StateError
from shardkit.plan import PlanParams
from shardkit.plan.tokens.config import IDENTITY_KEYS, TokenBlocks
from shardkit.plan.tokens.consumer import ConsumerView, work_view
from shardkit.plan.tokens.global_blocks import GlobalTokenPlan, build_global_token_plan
from shardkit.plan.tokens.pool import ConsumerWork

PART_KEYS = (*IDENTITY_KEYS, "order", "seq_len")
#: Stream positions a consumer holds the documents of at a time (TB34): its batches are cut in
#: chunks of whole units spanning about this many (its share is 1 / consumers of it).
SPAN_POSITIONS = 1 << 22


def refuse_unsupported(tokens: TokenBlocks) -> None:
    """TB34: pack mode over one global stream is not built; refused by name at construction."""
    if tokens.mode != "concat":
        raise ValueError("StreamingDataset(order='global', tokens=sk.TokenBlocks(mode='pack')): pack mode is not "
                         "supported in global order (specs/token-blocks.md TB34: packing one global stream "
                         "costs every consumer a pass over the stream before its position); use mode='concat', "
                         "or order='shard' with pack")


def global_plan(source: Any, params: PlanParams, tokens: TokenBlocks, resume: dict[str, Any] | None,
                group: int, where: str) -> GlobalTokenPlan:
    """The global-order token plan of ``source``'s epoch ``params.epoch`` (TB30, TB33); a fresh
    epoch with no global batch though it has positions is a ``PlanError`` (TB24's rule: the
    global batches are the same on every topology, so none has a batch)."""
    lengths = source.token_lengths(tokens.field, params.epoch)
    plan = build_global_token_plan(source.shard_sizes(params.epoch), lengths, params, tokens, resume, group,
                                   source.token_order())
    if resume is None and plan.steps_per_rank == 0 and plan.index.total > 0:
        raise PlanError(f"{where}: token blocks in global order: the epoch yields no batch ({plan.index.total} "
                        f"input positions, seq_len {tokens.seq_len}, global batch {params.global_batch_size} "
                        f"blocks, tail='drop'): a global batch needs {plan.global_positions} positions; use "
                        "tail='pad', a smaller seq_len or batch_size")
    return plan


def state_part(tokens: TokenBlocks, plan: GlobalTokenPlan) -> dict[str, Any]:
    return {**tokens.identity(), "order": "global", "seq_len": plan.options.seq_len}


def load_part(part: Any, tokens: TokenBlocks) -> int:
    """The saved ``seq_len`` of a global-order ``tokens`` part, after refusing a malformed one or
    one whose positions mean something else (TB8)."""
    if not isinstance(part, dict) or sorted(part) != sorted(PART_KEYS) or part["order"] != "global":
        raise StateError(f"state.tokens: expected a global-order token part with keys {sorted(PART_KEYS)}, "
                         f"got {part!r:.120}")
    for key in IDENTITY_KEYS:
        if part[key] != getattr(tokens, key):
            raise StateError(f"loader state: token {key} is {part[key]!r}, this dataset's is "
                             f"{getattr(tokens, key)!r}; a resume cannot change what a position is (TB8)")
    try:
        TokenBlocks(seq_len=part["seq_len"])
    except (PlanError, TypeError) as exc:
        raise StateError(f"state.tokens.seq_len: {exc}") from None
    return int(part["seq_len"])


def saved_plan(source: Any, tokens: TokenBlocks, seq_len: int, resume: dict[str, Any]) -> GlobalTokenPlan:
    """The plan that saved ``resume``: its params and ``seq_len``, from its position."""
    params = PlanParams.from_dict(resume["params"])
    saved = replace(tokens, seq_len=seq_len)
    return build_global_token_plan(source.shard_sizes(params.epoch), source.token_lengths(tokens.field, params.epoch),
                                   params, saved, resume, 1, source.token_order())


def consumer_parts(plan: GlobalTokenPlan, consumer: int, extra_tokens: int, first: int,
                   count: int) -> tuple[ConsumerWork, ConsumerView]:
    """Consumer ``consumer``'s work of its batches ``first … first + count - 1`` (its block
    ranges, TB31) and what it reads of them: the documents of that chunk only (TB34)."""
    work = plan.consumer_work(consumer, first, count)
    return work, work_view(plan.index, plan.options.mode, work.pieces, extra_tokens)
