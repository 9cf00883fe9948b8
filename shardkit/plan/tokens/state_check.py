"""The shape of a loader state's ``tokens`` part (specs/token-blocks.md TB13, TB22), checked
before any of it is read: types, ranges and caps only, so that a tampered state is a
``StateError`` naming the key, never a ``TypeError``, a ``KeyError`` or an allocation sized by
the state. Whether the consumer states are the replay of their offsets is checked later
(``build_token_plan``), against the plan they belong to.
"""

from __future__ import annotations

from typing import Any

from shardkit.errors import PlanError, StateError
from shardkit.plan.params import MAX_CONSUMERS, MAX_INT
from shardkit.plan.state import MAX_STATE_LEVELS
from shardkit.plan.tokens.config import IDENTITY_KEYS, LEVEL_KEYS, TokenBlocks

CONSUMER_KEYS = ("blocks", "carry", "doc_index", "piece_index", "token_offset")


def check_token_part(part: Any, num_levels: int) -> dict[str, Any]:
    """``part``, after refusing a ``tokens`` part that is not the shape shardkit writes for a
    plan state of ``num_levels`` levels (R13 caps them; ``MAX_CONSUMERS`` each level's consumers)."""
    if not isinstance(part, dict) or not isinstance(part.get("levels"), list):
        raise StateError("loader state: no 'tokens' part; it was not saved by a token-block dataset")
    missing = [key for key in IDENTITY_KEYS if key not in part]
    if missing:
        raise StateError(f"state.tokens: missing keys {missing}")
    levels = part["levels"]
    if len(levels) != num_levels or num_levels > MAX_STATE_LEVELS:
        raise StateError(f"state.tokens.levels: expected {num_levels} levels (one per plan level), "
                         f"got {len(levels)}")
    for i, level in enumerate(levels):
        _check_level(level, f"state.tokens.levels[{i}]")
    return part


def _check_level(level: Any, path: str) -> None:
    if not isinstance(level, dict) or any(key not in level for key in LEVEL_KEYS):
        raise StateError(f"{path}: expected an object with keys {list(LEVEL_KEYS)}, got {level!r:.80}")
    try:  # the cut's types and ranges, as TokenBlocks checks them (seq_len and open_blocks capped)
        TokenBlocks(**{key: level[key] for key in LEVEL_KEYS})
    except PlanError as exc:
        raise StateError(f"{path}: {exc}") from None
    consumers = level.get("consumers")
    if consumers is None:
        return
    if not isinstance(consumers, list) or len(consumers) > MAX_CONSUMERS:
        raise StateError(f"{path}.consumers: expected a list of at most {MAX_CONSUMERS} cutter states, "
                         f"got {consumers!r:.80}")
    for c, state in enumerate(consumers):
        _check_consumer(state, f"{path}.consumers[{c}]")


def _check_consumer(state: Any, path: str) -> None:
    if not isinstance(state, dict) or sorted(state) != list(CONSUMER_KEYS):
        raise StateError(f"{path}: expected an object with keys {list(CONSUMER_KEYS)}, got {state!r:.80}")
    for key in ("blocks", "piece_index", "token_offset"):
        _check_int(state[key], 0, f"{path}.{key}")
    _check_int(state["doc_index"], -1, f"{path}.doc_index")
    carry = state["carry"]
    if not isinstance(carry, list) or not all(isinstance(b, list) for b in carry):
        raise StateError(f"{path}.carry: expected a list of open blocks, got {carry!r:.80}")
    for b, block in enumerate(carry):
        for p, piece in enumerate(block):
            if not isinstance(piece, list) or len(piece) != 3:
                raise StateError(f"{path}.carry[{b}][{p}]: expected [document, start, stop], got {piece!r:.80}")
            for value in piece:
                _check_int(value, 0, f"{path}.carry[{b}][{p}]")


def _check_int(value: Any, minimum: int, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_INT:
        raise StateError(f"{path}: expected an int in {minimum}..2**63-1, got {value!r:.40}")


def plan_depth(plan_state: dict[str, Any]) -> int:
    """Levels of a plan state whose shape was checked (``check_state_shape``)."""
    depth, level = 1, plan_state
    while level["parent"] is not None:
        depth, level = depth + 1, level["parent"]
    return depth
