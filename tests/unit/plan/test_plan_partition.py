"""Properties of a fresh plan: specs/partition.md invariants P1-P10."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError
from shardkit.plan import PlanParams, build_plan, shard_order
from tests.helpers.plan_strategies import (
    all_samples,
    consumer_samples,
    epoch_ids,
    plan_params,
    shard_sizes,
)

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def sizes_and_params(draw: st.DrawFn, /, **fixed: object) -> tuple[list[int], PlanParams]:
    sizes = draw(shard_sizes())
    return sizes, draw(plan_params(sum(sizes), **fixed))


@PROPERTY
@given(sizes_and_params())
def test_exactly_once_equal_steps_minimal_tail(case: tuple[list[int], PlanParams]) -> None:
    """P1: exactly once; P2: equal steps; P3: minimal drop/pad; P4: pads flagged suffix."""
    sizes, params = case
    plan = build_plan(sizes, params)
    total, per_step = sum(sizes), params.world_size * params.batch_size
    outputs = all_samples(plan)
    real = np.concatenate([out.ids[~out.padded] for out in outputs])
    assert len(np.unique(real)) == len(real)  # P1: nothing twice
    assert len(real) == total - plan.num_dropped  # P1: everything but the reported drop
    assert real.min(initial=0) >= 0 and real.max(initial=-1) < total
    workers = params.workers_per_rank
    for rank in range(params.world_size):  # P2
        rank_batches = [plan.num_batches(rank * workers + w) for w in range(workers)]
        assert sum(rank_batches) == plan.steps_per_rank
        assert max(rank_batches) - min(rank_batches) <= 1
    for consumer, out in enumerate(outputs):
        assert (
            len(out.ids)
            == plan.num_samples(consumer)
            == plan.num_batches(consumer) * (params.batch_size)
        )
        real_count = plan.num_real_samples(consumer)
        assert not out.padded[:real_count].any() and out.padded[real_count:].all()  # P4
    assert plan.num_dropped < per_step and plan.num_padded < per_step  # P3
    if params.tail == "drop":
        assert plan.steps_per_rank == total // per_step and plan.num_padded == 0
    else:
        assert plan.steps_per_rank == -(-total // per_step) and plan.num_dropped == 0
    pads = np.concatenate([out.ids[out.padded] for out in outputs])
    assert len(pads) == plan.num_padded  # P3: reported, never silent


@PROPERTY
@given(sizes_and_params(shuffle=False))
def test_no_shuffle_is_manifest_order(case: tuple[list[int], PlanParams]) -> None:
    """P7: shuffle=False yields manifest order; P3: the drop is the tail, pads repeat the head."""
    sizes, params = case
    plan = build_plan(sizes, params)
    outputs = all_samples(plan)
    real = np.concatenate([out.ids[~out.padded] for out in outputs])
    assert np.array_equal(real, np.arange(sum(sizes) - plan.num_dropped))
    pads = np.concatenate([out.ids[out.padded] for out in outputs])
    if len(pads):
        assert np.array_equal(pads, np.arange(len(pads)) % sum(sizes))  # P4: from the start


@PROPERTY
@given(sizes_and_params())
def test_deterministic_and_seekable(case: tuple[list[int], PlanParams]) -> None:
    """P5: same inputs, same sequences; P9: seeking to any start yields exactly the suffix."""
    sizes, params = case
    first, second = build_plan(sizes, params), build_plan(list(sizes), params)
    rng = np.random.default_rng(params.seed % 2**32)
    for consumer in rng.choice(first.num_consumers, min(first.num_consumers, 4), replace=False):
        whole = consumer_samples(first, int(consumer))
        assert np.array_equal(whole.ids, consumer_samples(second, int(consumer)).ids)
        for start in {0, len(whole.ids), int(rng.integers(0, len(whole.ids) + 1))}:
            suffix = consumer_samples(first, int(consumer), start)
            assert np.array_equal(suffix.ids, whole.ids[start:])
            assert np.array_equal(suffix.padded, whole.padded[start:])


@PROPERTY
@given(sizes_and_params(shuffle=True))
def test_window_shuffle_stays_in_window(case: tuple[list[int], PlanParams]) -> None:
    """P10: windows output <= shuffle_window samples; a sample moves only within its window;
    P8: each consumer's real samples are one contiguous range of the epoch sequence."""
    sizes, params = case
    plan = build_plan(sizes, params)
    position = np.empty(sum(sizes), dtype=np.int64)
    position[epoch_ids(sizes, params)] = np.arange(sum(sizes))
    for consumer in range(min(plan.num_consumers, 16)):
        windows = list(plan.consumer_windows(consumer))
        assert all(w.num_samples <= params.shuffle_window for w in windows)
        out = consumer_samples(plan, consumer)
        where = position[out.ids[~out.padded]]
        if len(where):
            assert np.array_equal(np.sort(where), np.arange(where.min(), where.max() + 1))  # P8
            rank = np.arange(len(where))
            assert np.array_equal(
                (where - where.min()) // params.shuffle_window, rank // params.shuffle_window
            )


@PROPERTY
@given(sizes_and_params())
def test_shards_of_is_contiguous_in_epoch_order(case: tuple[list[int], PlanParams]) -> None:
    """P8: a consumer's real shards are a contiguous run of the epoch shard order; shards_of
    lists exactly the shards its windows decode."""
    sizes, params = case
    plan = build_plan(sizes, params)
    order = shard_order(len(sizes), params)
    rank_in_order = np.empty(len(sizes), dtype=np.int64)
    rank_in_order[order] = np.arange(len(sizes))
    for consumer in range(min(plan.num_consumers, 16)):
        decoded = {s.shard_index for w in plan.consumer_windows(consumer) for s in w.spans}
        assert set(plan.shards_of(consumer)) == decoded
        real = sorted(
            {
                s.shard_index
                for w in plan.consumer_windows(consumer)
                for s in w.spans
                if not s.padded
            },
            key=lambda shard: rank_in_order[shard],
        )
        positions = rank_in_order[real] if real else np.zeros(0, dtype=np.int64)
        assert np.all(np.diff(positions) >= 1)
        nonempty = [s for s in order[positions.min() : positions.max() + 1]] if real else []
        assert {s for s in nonempty if sizes[s] > 0} == set(real)


# 13! > 6e9: with at least 13 items to order, two epochs collide with chance < 2e-10.
ENOUGH_TO_ORDER = 13


@PROPERTY
@given(sizes_and_params(shuffle=True), st.integers(1, 5))
def test_other_epoch_other_order(case: tuple[list[int], PlanParams], delta: int) -> None:
    """P6: a different epoch gives a different shard order and different window orders."""
    sizes, params = case
    params_b = PlanParams(**(params.to_dict() | {"epoch": params.epoch + delta}))
    plan_a, plan_b = build_plan(sizes, params), build_plan(sizes, params_b)
    nonempty = set(np.flatnonzero(np.asarray(sizes, dtype=np.int64) > 0).tolist())
    order_a = [s for s in shard_order(len(sizes), params).tolist() if s in nonempty]
    order_b = [s for s in shard_order(len(sizes), params_b).tolist() if s in nonempty]
    if len(nonempty) >= ENOUGH_TO_ORDER:
        assert order_a != order_b
    window = min(params.shuffle_window, plan_a.num_real_samples(0))
    if window >= ENOUGH_TO_ORDER:
        assert not np.array_equal(consumer_samples(plan_a, 0).ids, consumer_samples(plan_b, 0).ids)


def test_other_epoch_other_order_small() -> None:
    """P6: even two shards (or a two-sample window) change order across a few epochs."""
    for sizes, window in (([1, 1], 1), ([2], 2)):
        orders = {
            tuple(
                consumer_samples(
                    build_plan(sizes, PlanParams(epoch=e, shuffle_window=window)), 0
                ).ids
            )
            for e in range(8)
        }
        assert orders == {(0, 1), (1, 0)}


def test_worked_example_23_samples() -> None:
    """P2, P3: the worked example's case, 23 samples on 2 ranks x 2 workers, batch 3 (partition.md)."""
    sizes = [5, 0, 7, 3, 8]
    drop = build_plan(sizes, PlanParams(world_size=2, num_workers=2, batch_size=3))
    assert drop.steps_per_rank == 3
    assert [drop.num_batches(c) for c in range(4)] == [2, 1, 2, 1]
    assert (drop.num_dropped, drop.num_padded) == (5, 0)
    pad = build_plan(sizes, PlanParams(world_size=2, num_workers=2, batch_size=3, tail="pad"))
    assert pad.steps_per_rank == 4
    assert [pad.num_batches(c) for c in range(4)] == [2, 2, 2, 2]
    assert (pad.num_dropped, pad.num_padded) == (0, 1)
    assert [pad.num_real_samples(c) for c in range(4)] == [6, 6, 6, 5]


def test_empty_dataset_and_tiny_pad() -> None:
    """P3: N=0 gives zero steps; N=1 with pad wraps the single sample to fill every batch."""
    empty = build_plan([], PlanParams(world_size=3, tail="pad"))
    assert empty.steps_per_rank == 0 and empty.num_padded == 0
    assert list(empty.consumer_windows(2)) == []
    tiny = build_plan([0, 1, 0], PlanParams(world_size=4, num_workers=2, batch_size=5, tail="pad"))
    assert tiny.steps_per_rank == 1 and tiny.num_padded == 19
    outputs = all_samples(tiny)
    assert sum(int((~out.padded).sum()) for out in outputs) == 1
    assert all(set(out.ids.tolist()) <= {0} for out in outputs)


def test_summary_is_json_able() -> None:
    """P3: counts dropped/padded are reported by summary() (for `shardkit plan`)."""
    import json

    plan = build_plan([10, 3, 0, 9], PlanParams(world_size=2, num_workers=3, batch_size=2))
    summary = json.loads(json.dumps(plan.summary()))
    assert summary["steps_per_rank"] == plan.steps_per_rank == 5
    assert summary["num_dropped"] == 2 and summary["num_padded"] == 0
    assert [c["samples"] for c in summary["consumers"]] == [4, 4, 2, 4, 4, 2]
    assert sum(c["real_samples"] for c in summary["consumers"]) == 20


@pytest.mark.parametrize(
    "kwargs",
    [
        {"world_size": 0},
        {"num_workers": -1},
        {"batch_size": 0},
        {"tail": "wrap"},
        {"shuffle_window": 0},
        {"seed": -1},
        {"epoch": 1.5},
        {"shuffle": 1},
        {"batch_size": True},
    ],
)
def test_bad_params_raise_plan_error(kwargs: dict[str, object]) -> None:
    """P5: parameters are validated with PlanError naming the field."""
    name = next(iter(kwargs))
    with pytest.raises(PlanError, match=name):
        PlanParams(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("sizes", [[3, -1], [[1, 2]], [1.5, 2.0]])
def test_bad_shard_sizes_raise_plan_error(sizes: list[object]) -> None:
    """P5: shard sizes must be a flat list of non-negative ints."""
    with pytest.raises(PlanError, match="shard_sizes"):
        build_plan(sizes, PlanParams())  # type: ignore[arg-type]


def test_bad_consumer_and_start_raise_plan_error() -> None:
    """P9: seeking outside a consumer's sequence is refused."""
    plan = build_plan([10], PlanParams(world_size=2, batch_size=2))
    with pytest.raises(PlanError, match="consumer"):
        plan.num_samples(2)
    with pytest.raises(PlanError, match="start"):
        plan.consumer_windows(0, plan.num_samples(0) + 1)
