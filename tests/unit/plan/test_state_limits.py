"""Hostile resume states are refused cleanly (specs/resume-state.md R8, R13): a parent chain
longer than the limit (without exhausting the stack, however long), and a loader state whose
plan params are not an object."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import StateError
from shardkit.plan import PlanParams, build_plan, plan_to_state, state_epoch, validate_state
from shardkit.plan.state import MAX_STATE_LEVELS

SIZES = [9, 0, 14, 3, 6]
PARAMS = PlanParams(seed=3, epoch=2, world_size=1, batch_size=1)
FINGERPRINT = "xxh64:feedface"


def chain(levels: int) -> dict[str, Any]:
    """A state of ``levels`` levels, each a well-formed level of the same epoch."""
    level = plan_to_state(build_plan(SIZES, PARAMS), [0], FINGERPRINT)
    state: dict[str, Any] | None = None
    for _ in range(levels):
        state = {**copy.deepcopy(level), "parent": state}
    assert state is not None
    return state


@settings(max_examples=15, deadline=None)
@given(levels=st.integers(1, MAX_STATE_LEVELS + 5))
def test_parent_chains_are_accepted_exactly_up_to_the_limit(levels):
    """R13: up to MAX_STATE_LEVELS levels validate and rebuild; one more is a StateError."""
    state = chain(levels)
    if levels <= MAX_STATE_LEVELS:
        validate_state(state, FINGERPRINT)
        assert build_plan(SIZES, PARAMS, state).level == levels - 1
        return
    with pytest.raises(StateError, match=rf"more than {MAX_STATE_LEVELS} levels of 'parent' \(R13\)"):
        validate_state(state, FINGERPRINT)


@pytest.mark.parametrize("check", [
    lambda s: validate_state(s, FINGERPRINT),
    lambda s: build_plan(SIZES, PARAMS, s),
    state_epoch,
])
def test_a_3000_level_chain_is_refused_without_recursion_error(check):
    state = chain(3000)
    with pytest.raises(StateError, match=r"^state: resume state has more than 100 levels"):
        check(state)


def test_a_loader_state_with_params_not_an_object_is_a_state_error():
    """R8: not an AttributeError from the loader's epoch check."""
    pytest.importorskip("torch")
    from shardkit.loader.shard_loader import LOADER_STATE_KIND, LOADER_STATE_VERSION, check_loader_state

    plan = plan_to_state(build_plan(SIZES, PARAMS), [0], FINGERPRINT)
    for params in ([1, 2], "seed=3", None, 7):
        state = {"version": LOADER_STATE_VERSION, "kind": LOADER_STATE_KIND, "epoch": 2, "steps": 0,
                 "plan": {**plan, "params": params}}
        with pytest.raises(StateError, match=r"state\.params: plan params: expected an object"):
            check_loader_state(state, FINGERPRINT)
    good = {"version": LOADER_STATE_VERSION, "kind": LOADER_STATE_KIND, "epoch": 2, "steps": 0, "plan": plan}
    check_loader_state(good, FINGERPRINT)
    with pytest.raises(StateError, match="'epoch' and plan params disagree"):
        check_loader_state({**good, "epoch": 3}, FINGERPRINT)
