"""A plan state of either order: the default one (offsets per consumer, a parent chain;
plan/state.py) or a global-order one (one position; plan/global_order/state.py). What reads a
saved plan state without knowing its order checks it here (specs/resume-state.md R16), and
what reads a plan of either order names it ``SamplePlan``."""

from __future__ import annotations

from typing import Any

from shardkit.errors import StateError
from shardkit.plan.global_order.order import GlobalOrderPlan
from shardkit.plan.global_order.state import (
    check_global_state_shape,
    global_state_epoch,
    is_global_state,
    validate_global_state,
)
from shardkit.plan.params import ORDERS
from shardkit.plan.plan import Plan
from shardkit.plan.state import check_state_shape, state_epoch, validate_state

#: A sample plan of either order: what a reader walks and the loader counts steps with.
SamplePlan = Plan | GlobalOrderPlan


def state_order(state: Any) -> str:
    """``"global"`` for a global-order state (its ``order`` key), else ``"shard"`` (R16)."""
    return "global" if is_global_state(state) else "shard"


def check_any_state_shape(state: Any) -> None:
    """Refuse a malformed plan state of either order before any part of it is read (R8, R14)."""
    if is_global_state(state):
        check_global_state_shape(state)
    else:
        check_state_shape(state)


def validate_any_state(state: Any, fingerprint: str) -> None:
    """:func:`validate_state` or :func:`validate_global_state`, by the state's order (R8)."""
    if is_global_state(state):
        validate_global_state(state, fingerprint)
    else:
        validate_state(state, fingerprint)


def any_state_epoch(state: dict[str, Any]) -> int:
    """The epoch a plan state of either order belongs to (R7)."""
    return global_state_epoch(state) if is_global_state(state) else state_epoch(state)


def check_state_order(state: Any, order: str, where: str) -> None:
    """R17: a state saved in one order is refused by a reader of the other, naming both."""
    if order not in ORDERS:
        raise StateError(f"{where}: order {order!r} is not one of {ORDERS}")
    saved = state_order(state)
    if saved != order:
        raise StateError(f"{where}: the state was saved with order={saved!r}, but this dataset reads "
                         f"order={order!r}; resume it with StreamingDataset(..., order={saved!r}) (a state "
                         f"of one order cannot continue the other's epoch, specs/resume-state.md R17)")
