"""Global order (specs/partition.md P27-P34): the same global batches on every topology, exactly
once, equal steps, resumed across topologies and global batch sizes."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError, StateError
from shardkit.plan import PlanParams, build_plan, plan_to_state
from shardkit.plan.global_order.order import GlobalOrderPlan
from shardkit.plan.global_order.state import build_global_plan, global_plan_to_state, validate_global_state
from shardkit.plan.rotation import StepPlan, worker_consumer
from tests.helpers.global_order import (
    FINGERPRINT,
    Topology,
    assembled,
    delivery_order,
    epoch_params,
    fixed_of,
    fresh,
    offsets_after,
    on,
    reference_batches,
    reference_ids,
    saved,
    topologies,
)
from tests.helpers.plan_strategies import shard_sizes

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SIZES = shard_sizes(max_samples=2_000)


@PROPERTY
@given(SIZES, epoch_params(), st.integers(1, 48).flatmap(lambda g: st.tuples(
    st.just(g), st.lists(topologies(g), min_size=2, max_size=4))))
def test_global_batches_are_the_same_on_every_topology(sizes: list[int], params: PlanParams,
                                                       case: tuple[int, list[Topology]]) -> None:
    """P27-P29: one global batch size, any ranks x workers x group: the same global batches,
    bit for bit, and they are the 1-process default plan's sequence cut into B_g, rows sorted."""
    global_batch, shapes = case
    expected = reference_batches(reference_ids(sizes, fixed_of(params, shapes[0])), 0, global_batch, params.tail)
    for shape in shapes:
        assert assembled(fresh(sizes, params, shape)) == expected, shape


@pytest.mark.parametrize("shape", [Topology(1, 4, 12), Topology(2, 2, 6), Topology(4, 1, 3),
                                   Topology(4, 0, 3), Topology(2, 2, 6, 2), Topology(12, 3, 1, 3)])
def test_one_by_four_two_by_two_four_by_one_agree(shape: Topology) -> None:
    """P27 on the issue's shapes: 1x4, 2x2 and 4x1 (and others) at B_g = 12, shuffled, 2 epochs."""
    sizes = [37, 0, 250, 8, 91, 64, 3, 120] * 4
    for epoch in (0, 1):
        params = PlanParams(seed=7, epoch=epoch, shuffle_window=40, order="global")
        ids = reference_ids(sizes, fixed_of(params, shape))
        assert assembled(fresh(sizes, params, shape)) == reference_batches(ids, 0, 12, "drop")


@PROPERTY
@given(SIZES, epoch_params(), topologies())
def test_exactly_once_equal_steps_pads_last(sizes: list[int], params: PlanParams, shape: Topology) -> None:
    """P30, P33: each rank yields S = one slice per global batch; workers' items are dealt round
    robin so the loop receives g = 0, 1, 2, ...; every sample once but the reported drop; pads
    only in the last global batch, flagged, fewer than B_g."""
    plan = fresh(sizes, params, shape)
    batches = assembled(plan)
    size = plan.params.global_batch_size
    steps = sum(sizes) // size if params.tail == "drop" else -(-sum(sizes) // size)
    assert plan.steps_per_rank == plan.num_global_batches == len(batches) == steps
    for rank in range(shape.world_size):
        assert delivery_order(plan, rank) == list(range(steps))
    real = [i for ids, pads in batches for i, pad in zip(ids, pads, strict=True) if not pad]
    dropped = plan.dropped_indices().tolist()
    assert sorted(real + dropped) == list(range(sum(sizes)))
    assert len(dropped) == plan.num_dropped < size and plan.num_padded < size
    assert sum(pad for _, pads in batches[:-1] for pad in pads) == 0
    assert sum(batches[-1][1]) == plan.num_padded if batches else plan.num_padded == 0


@PROPERTY
@given(SIZES, epoch_params(), st.integers(1, 36).flatmap(lambda g: st.lists(topologies(g), min_size=2, max_size=5)),
       st.lists(st.floats(0, 1), min_size=5, max_size=5))
def test_resume_across_topologies_leaves_later_batches_identical(
        sizes: list[int], params: PlanParams, chain: list[Topology], kills: list[float]) -> None:
    """P31: killed at any step and resumed on another ranks x workers x group (same B_g), again
    and again: the global batches received over the chain are the uninterrupted run's, bit for bit."""
    whole = assembled(fresh(sizes, params, chain[0]))
    received: list[tuple[tuple[int, ...], tuple[bool, ...]]] = []
    state = None
    for level, shape in enumerate(chain):
        plan = build_global_plan(sizes, on(params, shape), state, shape.group)
        batches = assembled(plan)
        last = level == len(chain) - 1
        count = len(batches) if last else int(kills[level] * len(batches) + 0.5)
        received += batches[:count]
        state = saved(plan, count)
    assert received == whole


@PROPERTY
@given(SIZES, epoch_params(), st.lists(topologies(), min_size=2, max_size=4),
       st.lists(st.floats(0, 1), min_size=4, max_size=4))
def test_a_new_global_batch_size_recuts_the_rest_exactly_once(
        sizes: list[int], params: PlanParams, chain: list[Topology], kills: list[float]) -> None:
    """P31, P33: each resume may change B_g and the tail: its global batches are the rest of the
    epoch's sequence (from the saved position) cut anew; over the chain every sample is received
    once, except the last plan's reported drop."""
    ids = reference_ids(sizes, fixed_of(params, chain[0]))
    real: list[int] = []
    state = None
    for level, shape in enumerate(chain):
        tail = params.tail if level % 2 == 0 else ("pad" if params.tail == "drop" else "drop")
        plan = build_global_plan(sizes, on(params, shape, tail=tail), state, shape.group)
        batches = assembled(plan)
        assert batches == reference_batches(ids, plan.start, plan.params.global_batch_size, tail)
        count = len(batches) if level == len(chain) - 1 else int(kills[level] * len(batches) + 0.5)
        real += [i for b, pads in batches[:count] for i, pad in zip(b, pads, strict=True) if not pad]
        state = saved(plan, count)
    assert Counter(real + plan.dropped_indices().tolist()) == Counter(range(sum(sizes)))


@PROPERTY
@given(SIZES, epoch_params(), topologies(), st.data())
def test_a_seek_yields_the_rest_of_a_consumer(sizes: list[int], params: PlanParams, shape: Topology,
                                              data: st.DataObject) -> None:
    """P34: consumer_windows(c, start) outputs exactly positions start.. of consumer c."""
    plan = fresh(sizes, params, shape)
    consumer = data.draw(st.integers(0, plan.num_consumers - 1))
    whole = np.concatenate([w.global_indices(plan.shard_offsets) for w in plan.consumer_windows(consumer)]
                           + [np.zeros(0, dtype=np.int64)])
    start = data.draw(st.integers(0, len(whole)))
    rest = [w.global_indices(plan.shard_offsets) for w in plan.consumer_windows(consumer, start)]
    assert np.array_equal(np.concatenate(rest + [np.zeros(0, dtype=np.int64)]), whole[start:])
    shards = set(plan.shards_of(consumer, start))
    assert shards == set((np.searchsorted(plan.shard_offsets, whole[start:], side="right") - 1).tolist())


def test_a_state_is_one_position_of_the_sequence() -> None:
    """P31: the state records the sequence's params and how far the loop got, nothing per consumer."""
    sizes = [5, 0, 7, 3, 8]
    params = PlanParams(seed=0, world_size=2, num_workers=2, batch_size=3, shuffle_window=4, order="global")
    plan = build_global_plan(sizes, params)
    state = global_plan_to_state(plan, offsets_after(plan, 2), FINGERPRINT)
    assert state["position"] == 12 and state["order"] == "global"
    assert state["sequence"] == {**params.to_dict(), "world_size": 1, "num_workers": 0, "batch_size": 6}
    validate_global_state(state, FINGERPRINT)
    with pytest.raises(StateError, match="fingerprint"):
        validate_global_state(state, "xxh64:other")
    one_rank = build_global_plan(sizes, replace(params, world_size=1, batch_size=6), state)
    assert one_rank.start == 12 and assembled(one_rank) == assembled(plan)[2:]  # the resume-state.md example
    recut = build_global_plan(sizes, replace(params, world_size=2, batch_size=2), state)
    ids = reference_ids(sizes, recut.sequence_params)
    assert assembled(recut) == reference_batches(ids, 12, 4, "drop") and recut.num_dropped == 3


def test_offsets_that_are_not_a_prefix_or_differ_between_ranks_are_refused() -> None:
    """P31: a state needs every rank at the same global batch, received in order (in_order=True)."""
    params = PlanParams(world_size=2, num_workers=2, batch_size=2, order="global")
    plan = build_global_plan([40], params)
    assert global_plan_to_state(plan, [2, 2, 2, 2], FINGERPRINT)["position"] == 8
    with pytest.raises(StateError, match="in-order delivery"):
        global_plan_to_state(plan, [0, 4, 0, 4], FINGERPRINT)  # worker 1 ran ahead of worker 0
    with pytest.raises(StateError, match="different numbers"):
        global_plan_to_state(plan, [2, 2, 2, 0], FINGERPRINT)
    # a rank continuing its own unfinished iteration (R10) counts only its consumers
    assert global_plan_to_state(plan, [0, 0, 2, 2], FINGERPRINT, rank=1)["position"] == 8
    with pytest.raises(StateError, match="in-order delivery"):
        global_plan_to_state(plan, [0, 0, 0, 2], FINGERPRINT, rank=1)


def test_bad_states_and_params_are_refused() -> None:
    """P31: epoch, position and shape are checked; the default builder refuses a global order."""
    params = PlanParams(batch_size=4, order="global")
    state = saved(build_global_plan([10, 10], params), 1)
    with pytest.raises(StateError, match="epoch"):
        build_global_plan([10, 10], replace(params, epoch=1), state)
    with pytest.raises(StateError, match="position"):
        build_global_plan([10, 10], params, {**state, "position": 21})
    with pytest.raises(StateError, match="keys"):
        build_global_plan([10, 10], params, {**state, "offsets": []})
    with pytest.raises(PlanError, match="build_global_plan"):
        build_plan([10, 10], params)
    with pytest.raises(PlanError, match="order"):
        PlanParams(order="random")
    assert "order" not in PlanParams().to_dict()  # P15: states of the default order unchanged
    shard_state = plan_to_state(build_plan([10, 10], PlanParams(batch_size=4)), [4], FINGERPRINT)
    with pytest.raises(StateError, match="order"):  # offsets never describe a global-order plan
        build_plan([10, 10], PlanParams(batch_size=4), {**shard_state, "params": {**shard_state["params"],
                                                                                  "order": "global"}})


def test_the_loader_counts_steps_with_it_as_with_a_plan() -> None:
    """P30: a global-order plan is a StepPlan (mypy checks the assignment); worker w serves
    consumer r*W + w, and a rank's consumers' batches sum to the steps."""
    plan: StepPlan = build_global_plan([100, 7], PlanParams(world_size=3, num_workers=2, batch_size=4, order="global"))
    assert isinstance(plan, GlobalOrderPlan)
    assert [worker_consumer(plan, 1, w, 2, group=4) for w in range(2)] == [2, 3]
    assert plan.num_batches(2) + plan.num_batches(3) == plan.steps_per_rank == 107 // 12
