"""Resume state: encode a plan's consumed offsets, validate them, rebuild the plan (G6 in docs/guarantees.md).

The state is a JSON-able dict (specs/resume-state.md)::

    {"version": 1, "fingerprint": str, "params": {...PlanParams...},
     "offsets": [int, ...one per consumer], "parent": null | <state of the previous level>}

Rebuilding replays only arithmetic over shard and consumer counts, never consumed samples.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shardkit.errors import PlanError, StateError
from shardkit.plan.params import PlanParams
from shardkit.plan.plan import Plan, base_plan, elastic_plan
from shardkit.plan.spans import ShardSizes

STATE_VERSION = 1
STATE_KEYS = ("version", "fingerprint", "params", "offsets", "parent")
BasePlan = Callable[[np.ndarray, PlanParams], Plan]  # level 0 from (shard sizes, params)
#: R13: a state and its parents; each parent is one elastic resume within the same epoch.
MAX_STATE_LEVELS = 100


def build_plan(
    shard_sizes: ShardSizes,
    params: PlanParams,
    resume: dict[str, Any] | None = None,
    base: BasePlan = base_plan,
) -> Plan:
    """The plan for ``params.epoch``, optionally resuming from a saved state.

    - ``resume=None``: the fresh plan (P1-P6).
    - same epoch and same partition params as the state: the same plan (parent chain
      included) with ``start_offsets`` = the saved offsets (R2).
    - same epoch, other topology/batch/tail/shuffle/seed: an elastic plan over the remainder
      (R3-R5), starting at 0.

    The state's epoch must equal ``params.epoch`` (R7); the fingerprint is checked separately
    by :func:`validate_state`. ``base`` builds level 0 (a mixture passes its own, specs/
    mixture.md); elastic levels are the same for every base. Raises :class:`PlanError` for bad inputs and
    :class:`StateError` for a malformed or inconsistent state.
    """
    if params.order != "shard":
        raise PlanError(f"plan parameter order {params.order!r}: build it with "
                        "shardkit.plan.global_order.state.build_global_plan (specs/partition.md P27)")
    sizes = checked_sizes(shard_sizes)
    if resume is None:
        return base(sizes, params)
    _check_shape(resume, "state")
    saved = PlanParams.from_dict(resume["params"])
    if saved.epoch != params.epoch:
        raise StateError(
            f"resume state is for epoch {saved.epoch}, but the plan asked for epoch "
            f"{params.epoch}; resume that epoch first, later epochs start fresh"
        )
    if saved.same_partition(params):
        plan = _plan_at(sizes, params, resume["parent"], base)
        return plan.with_start_offsets(_checked_offsets(plan, resume["offsets"], "state"))
    return _plan_at(sizes, params, resume, base)


def plan_to_state(plan: Plan, offsets: Sequence[int], fingerprint: str) -> dict[str, Any]:
    """The resume state after consumer ``c`` delivered ``offsets[c]`` samples of its sequence.

    ``offsets`` are positions in the consumer sequences (they include ``start_offsets``), so
    a state saved right after a resume, with nothing consumed, equals the state resumed from.
    """
    if not isinstance(fingerprint, str):
        raise StateError(f"fingerprint: expected a str, got {type(fingerprint).__name__}")
    checked = _checked_offsets(plan, list(offsets), "offsets")
    return {
        "version": STATE_VERSION,
        "fingerprint": fingerprint,
        "params": plan.params.to_dict(),
        "offsets": checked,
        "parent": copy.deepcopy(plan.parent_state),
    }


def validate_state(state: Any, fingerprint: str) -> None:
    """Refuse a state that is malformed, from a newer version or for another dataset (R8)."""
    _check_shape(state, "state")
    level: Any = state
    path = "state"
    while level is not None:
        if level["fingerprint"] != fingerprint:
            raise StateError(
                f"{path}: resume state is for dataset fingerprint {level['fingerprint']!r}, "
                f"expected {fingerprint!r} (the dataset changed since the state was saved)"
            )
        level, path = level["parent"], f"{path}.parent"


def check_state_shape(state: Any) -> None:
    """Refuse a malformed state (types, ranges and caps of every level, R13, R14) before any part
    of it is read; the fingerprint and the offsets against a plan are checked later."""
    _check_shape(state, "state")


def state_epoch(state: dict[str, Any]) -> int:
    """The epoch a resume state belongs to (the loader resumes that epoch first)."""
    _check_shape(state, "state")
    return int(state["params"]["epoch"])


def _plan_at(
    sizes: np.ndarray, params: PlanParams, parent: dict[str, Any] | None, base: BasePlan
) -> Plan:
    """The plan whose previous level is described by ``parent`` (None: level 0)."""
    if parent is None:
        return base(sizes, params)
    old_params = PlanParams.from_dict(parent["params"])
    old = _plan_at(sizes, old_params, parent["parent"], base)
    offsets = _checked_offsets(old, parent["offsets"], "parent")
    return elastic_plan(old, offsets, params, _normalised(parent))


def _normalised(state: dict[str, Any]) -> dict[str, Any]:
    """A private copy with builtin types only (the plan keeps it as its parent state)."""
    parent = state["parent"]
    return {
        "version": int(state["version"]),
        "fingerprint": str(state["fingerprint"]),
        "params": PlanParams.from_dict(state["params"]).to_dict(),
        "offsets": [int(offset) for offset in state["offsets"]],
        "parent": None if parent is None else _normalised(parent),
    }


def checked_sizes(shard_sizes: ShardSizes) -> np.ndarray:
    sizes = np.asarray(shard_sizes)
    if sizes.size == 0:
        return np.zeros(0, dtype=np.int64)
    if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer):
        raise PlanError(f"shard_sizes: expected a flat sequence of ints, got dtype {sizes.dtype}")
    if int(sizes.min()) < 0:
        bad = int(np.argmax(sizes < 0))
        raise PlanError(f"shard_sizes[{bad}]: expected >= 0, got {int(sizes[bad])}")
    return sizes.astype(np.int64)


def _checked_offsets(plan: Plan, offsets: Any, path: str) -> list[int]:
    if not isinstance(offsets, list) or len(offsets) != plan.num_consumers:
        raise StateError(
            f"{path}.offsets: expected {plan.num_consumers} offsets, got {_describe(offsets)}"
        )
    batch = plan.params.batch_size
    for consumer, offset in enumerate(offsets):
        total = plan.num_samples(consumer)
        if not _is_int(offset) or not 0 <= offset <= total or offset % batch:
            raise StateError(
                f"{path}.offsets[{consumer}]: expected a multiple of batch_size {batch} in "
                f"0..{total} (consumer {consumer}'s samples), got {offset!r}"
            )
    return [int(offset) for offset in offsets]


def _check_shape(state: Any, path: str) -> None:
    """Structure, types and versions of every level (at most ``MAX_STATE_LEVELS``, R13, walked
    without recursion); offsets vs counts are checked later."""
    level: Any = state
    root, epoch = path, None
    for depth in range(MAX_STATE_LEVELS + 1):
        if level is None:
            return
        if depth == MAX_STATE_LEVELS:
            raise StateError(
                f"{root}: resume state has more than {MAX_STATE_LEVELS} levels of 'parent' (R13); "
                "it cannot come from shardkit"
            )
        _check_level(level, path)
        if epoch is not None and level["params"]["epoch"] != epoch:
            raise StateError(
                f"{path}.params.epoch: expected {epoch} (levels of one state share an epoch), "
                f"got {level['params']['epoch']}"
            )
        epoch = level["params"]["epoch"]
        level, path = level["parent"], f"{path}.parent"


def _check_level(state: Any, path: str) -> None:
    """One level's keys, version, fingerprint, params and offsets (not its parent's)."""
    if not isinstance(state, dict):
        raise StateError(f"{path}: expected an object, got {type(state).__name__}")
    if sorted(state) != sorted(STATE_KEYS):
        raise StateError(f"{path}: expected keys {sorted(STATE_KEYS)}, got {sorted(state)}")
    version = state["version"]
    if not _is_int(version) or version < 1:
        raise StateError(f"{path}.version: expected an int >= 1, got {version!r}")
    if version > STATE_VERSION:
        raise StateError(
            f"{path}.version: resume state version {version} is newer than this shardkit "
            f"reads (expected <= {STATE_VERSION}); upgrade shardkit"
        )
    if not isinstance(state["fingerprint"], str):
        raise StateError(f"{path}.fingerprint: expected a str, got {state['fingerprint']!r}")
    try:
        params = PlanParams.from_dict(state["params"])
    except PlanError as error:
        raise StateError(f"{path}.params: {error}") from error
    if params.order != "shard":  # a global-order state has its own shape (plan/global_order/state.py, P31)
        raise StateError(f"{path}.params.order: expected 'shard' in a state with offsets, got {params.order!r}")
    _check_offset_list(state["offsets"], params, path)


def _check_offset_list(offsets: Any, params: PlanParams, path: str) -> None:
    if not isinstance(offsets, list) or len(offsets) != params.num_consumers:
        raise StateError(
            f"{path}.offsets: expected a list of {params.num_consumers} ints (one per "
            f"consumer), got {_describe(offsets)}"
        )
    for consumer, offset in enumerate(offsets):
        if not _is_int(offset) or offset < 0 or offset % params.batch_size:
            raise StateError(
                f"{path}.offsets[{consumer}]: expected a multiple of batch_size "
                f"{params.batch_size} >= 0, got {offset!r}"
            )


def _describe(offsets: Any) -> str:
    if isinstance(offsets, list):
        return f"a list of {len(offsets)}"
    return type(offsets).__name__


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
