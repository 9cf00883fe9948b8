"""P16, P17: a fresh epoch that yields no batch is an error; a large dropped share a warning."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanParams, build_plan, check_epoch_yield
from shardkit.plan.epoch_yield import DROP_WARNING_FRACTION
from tests.helpers.plan_strategies import plan_params, shard_sizes


@settings(deadline=None)
@given(st.data())
def test_empty_exactly_when_a_fresh_epoch_of_samples_has_no_step(data):
    """P16: ``empty`` iff N > 0 and steps_per_rank == 0; never with tail='pad'; P17: a
    warning iff tail='drop' drops more than the documented share."""
    sizes = data.draw(shard_sizes(max_samples=5000))
    params = data.draw(plan_params(sum(sizes)))
    plan = build_plan(sizes, params)
    problem = check_epoch_yield(plan.num_source_samples, params)
    n = plan.num_source_samples
    empty = n > 0 and plan.steps_per_rank == 0
    warned = n > 0 and not empty and params.tail == "drop" and plan.num_dropped > DROP_WARNING_FRACTION * n
    assert (problem is not None and problem.empty) == empty
    assert (problem is not None and not problem.empty) == warned
    if params.tail == "pad" or n == 0:
        assert problem is None
    if plan.num_consumers <= 16:  # summary() lists every consumer's shards
        assert plan.summary()["warnings"] == ([problem.message] if problem else [])


def test_message_names_every_number_and_the_ways_out():
    problem = check_epoch_yield(100, PlanParams(world_size=2, num_workers=4, batch_size=64))
    assert problem is not None and problem.empty
    for part in ("100 samples", "2 rank(s) x 4 worker(s)", "batch_size 64", "tail='drop'",
                 "= 128 samples", "tail='pad' (repeats 28 samples", "batch_size <= 50"):
        assert part in problem.message


def test_more_ranks_than_samples_suggests_fewer_ranks():
    problem = check_epoch_yield(3, PlanParams(world_size=8, batch_size=1))
    assert problem is not None and problem.empty and "at most 3 rank(s)" in problem.message


def test_large_drop_is_a_warning_naming_the_share():
    problem = check_epoch_yield(100, PlanParams(world_size=2, batch_size=32))
    assert problem is not None and not problem.empty
    assert "drops 36 of 100 samples (36%)" in problem.message and "1 step(s) per rank" in problem.message
    assert check_epoch_yield(100, PlanParams(world_size=2, batch_size=5)) is None


@pytest.mark.parametrize("level", [1, 2])
def test_a_resumed_remainder_may_be_shorter_than_a_step(level):
    """An elastic resume near the end of an epoch rightly has nothing left to yield."""
    assert check_epoch_yield(5, PlanParams(world_size=4, batch_size=8), level) is None


def test_summary_stays_json():
    summary = build_plan([30, 20], PlanParams(world_size=4, batch_size=16)).summary()
    assert json.loads(json.dumps(summary))["warnings"][0].startswith("the epoch yields no batch")
