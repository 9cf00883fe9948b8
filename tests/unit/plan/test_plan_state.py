"""Resume-state schema, round trips and refusals: specs/resume-state.md R1, R7-R9."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from shardkit.errors import StateError
from shardkit.plan import (
    STATE_VERSION,
    PlanParams,
    build_plan,
    plan_to_state,
    state_epoch,
    validate_state,
)

SIZES = [9, 0, 14, 3, 6]
PARAMS = PlanParams(seed=3, epoch=2, world_size=2, num_workers=2, batch_size=2)
FINGERPRINT = "xxh64:feedface"


def elastic_state() -> dict[str, Any]:
    """A two-level state: saved on 2x2 workers, resumed on 3 ranks, saved again."""
    plan = build_plan(SIZES, PARAMS)
    first = plan_to_state(plan, [2, 0, 4, 2], FINGERPRINT)
    other = PlanParams(seed=3, epoch=2, world_size=3, batch_size=2)
    resumed = build_plan(SIZES, other, first)
    return plan_to_state(resumed, [2, 0, 2], FINGERPRINT)


def test_state_schema_example() -> None:
    """R1: the documented schema, JSON-able, with the parent chain of an elastic resume."""
    state = elastic_state()
    assert json.loads(json.dumps(state)) == state
    assert set(state) == {"version", "fingerprint", "params", "offsets", "parent"}
    assert state["version"] == STATE_VERSION == 1
    assert state["params"] == PlanParams(seed=3, epoch=2, world_size=3, batch_size=2).to_dict()
    assert state["offsets"] == [2, 0, 2]
    assert state["parent"]["offsets"] == [2, 0, 4, 2]
    assert state["parent"]["parent"] is None
    validate_state(state, FINGERPRINT)
    assert state_epoch(state) == 2


def test_round_trip_state_plan_state() -> None:
    """R1, R2: state -> build_plan -> state (nothing consumed) is the identity, per level."""
    state = elastic_state()
    params = PlanParams.from_dict(state["params"])
    plan = build_plan(SIZES, params, state)
    assert plan.level == 1 and plan.start_offsets == (2, 0, 2)
    assert plan_to_state(plan, list(plan.start_offsets), FINGERPRINT) == state


def test_num_workers_zero_and_one_are_the_same_topology() -> None:
    """R2: W=0 and W=1 both give one consumer per rank, so a resume is not elastic."""
    zero = build_plan(SIZES, PlanParams(world_size=2, num_workers=0, batch_size=2))
    state = plan_to_state(zero, [2, 4], FINGERPRINT)
    one = build_plan(SIZES, PlanParams(world_size=2, num_workers=1, batch_size=2), state)
    assert one.level == 0 and one.start_offsets == (2, 4)


def test_state_is_a_private_copy() -> None:
    """R1: mutating a returned state never changes the plan it came from."""
    state = elastic_state()
    plan = build_plan(SIZES, PlanParams.from_dict(state["params"]), state)
    state["parent"]["offsets"][0] = 999
    assert plan_to_state(plan, [2, 0, 2], FINGERPRINT)["parent"]["offsets"][0] == 2


def test_other_fingerprint_refused() -> None:
    """R8: a state for another dataset is refused, naming expected and got."""
    with pytest.raises(StateError, match="'xxh64:feedface'.*expected 'xxh64:other'"):
        validate_state(elastic_state(), "xxh64:other")
    state = elastic_state()
    state["parent"]["fingerprint"] = "xxh64:old"
    with pytest.raises(StateError, match=r"state\.parent: .*'xxh64:old'"):
        validate_state(state, FINGERPRINT)


def test_newer_version_refused() -> None:
    """R8: a state from a newer shardkit is refused with an upgrade hint."""
    state = elastic_state()
    state["version"] = STATE_VERSION + 1
    with pytest.raises(StateError, match="version 2 is newer.*expected <= 1"):
        validate_state(state, FINGERPRINT)


def mutate(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    state = copy.deepcopy(elastic_state())
    target = state
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return state


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("version",), "1", r"state\.version: expected an int"),
        (("version",), 0, r"state\.version: expected an int >= 1"),
        (("fingerprint",), 7, r"state\.fingerprint: expected a str"),
        (("params",), KeyError, r"state: expected keys"),
        (("params", "tail"), "wrap", r"state\.params: .*tail"),
        (("params", "extra"), 1, r"state\.params: .*unknown keys \['extra'\]"),
        (("offsets",), [0, 0], r"state\.offsets: expected a list of 3 ints"),
        (("offsets",), [0, "2", 0], r"state\.offsets\[1\]: expected a multiple of batch_size 2"),
        (("parent", "offsets"), [0, 0, 1, 0], r"state\.parent\.offsets\[2\]: .*got 1"),
        (("parent", "offsets"), "0", r"state\.parent\.offsets: expected a list of 4"),
        (("parent", "params", "epoch"), 1, r"state\.parent\.params\.epoch: expected 2"),
    ],
)
def test_malformed_state_refused(path: tuple[Any, ...], value: Any, message: str) -> None:
    """R8: malformed states are refused with the path, expected and got."""
    with pytest.raises(StateError, match=message):
        validate_state(mutate(path, value), FINGERPRINT)


def test_not_a_dict_refused() -> None:
    """R8: a state must be an object."""
    with pytest.raises(StateError, match="expected an object, got list"):
        validate_state([], FINGERPRINT)


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        ([2, 0, 3], r"offsets\[2\]: expected a multiple of batch_size 2"),
        ([2, 0, 100], r"offsets\[2\]: .* in 0\.\.\d+"),
        ([-2, 0, 0], r"offsets\[0\]"),
        ([2, 0, True], r"offsets\[2\]"),
    ],
)
def test_offsets_outside_consumer_refused(offsets: list[Any], message: str) -> None:
    """R9: offsets are multiples of the batch size within each consumer's n_c."""
    state = mutate(("offsets",), offsets)
    with pytest.raises(StateError, match=message):
        build_plan(SIZES, PlanParams.from_dict(state["params"]), state)


def test_plan_to_state_checks_offsets() -> None:
    """R9: plan_to_state refuses offsets the plan cannot have produced."""
    plan = build_plan(SIZES, PARAMS)
    with pytest.raises(StateError, match="expected 4 offsets, got a list of 2"):
        plan_to_state(plan, [0, 0], FINGERPRINT)


def test_other_epoch_refused() -> None:
    """R7: a state resumes its own epoch only; the loader starts later epochs fresh."""
    state = elastic_state()
    later = PlanParams(seed=3, epoch=3, world_size=3, batch_size=2)
    with pytest.raises(StateError, match="epoch 2, but the plan asked for epoch 3"):
        build_plan(SIZES, later, state)
    assert build_plan(SIZES, later).level == 0
