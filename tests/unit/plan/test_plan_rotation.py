"""L4: ``worker_consumer`` — which global consumer a worker serves — on worked examples. The
property over DataLoader's delivery order is tests/unit/loader/test_group_rotation.py."""

from __future__ import annotations

import pytest

from shardkit.plan import PlanParams, build_plan, plan_to_state, worker_consumer


def _plan(offsets: list[int] | None = None, workers: int = 3, world: int = 2):
    params = PlanParams(seed=0, world_size=world, num_workers=workers, batch_size=2, shuffle=False)
    plan = build_plan([60], params)
    if offsets is None:
        return plan
    return build_plan([60], params, plan_to_state(plan, offsets, "xxh64:0"))


def test_a_fresh_plan_gives_worker_w_of_rank_r_consumer_r_times_w_plus_w():
    plan = _plan()
    assert [[worker_consumer(plan, r, w, 3) for w in range(3)] for r in range(2)] == [[0, 1, 2], [3, 4, 5]]


def test_the_training_process_reading_itself_serves_its_rank():
    plan = _plan(workers=0)
    assert [worker_consumer(plan, r, 0, 0) for r in range(2)] == [0, 1]


@pytest.mark.parametrize(("group", "expected"), [(1, [1, 2, 0]), (2, [0, 1, 2])])
def test_a_resume_rotates_by_the_whole_groups_a_rank_had_delivered(group, expected):
    # rank 0's consumers had delivered 1, 0, 0 batches (of 2 samples): one item with groups of 1,
    # none complete with groups of 2 (consumer 0's group was cut, so worker 0 takes it again)
    plan = _plan([2, 0, 0, 0, 0, 0])
    assert [worker_consumer(plan, 0, w, 3, group) for w in range(3)] == expected
    assert [worker_consumer(plan, 1, w, 3, group) for w in range(3)] == [3, 4, 5]
