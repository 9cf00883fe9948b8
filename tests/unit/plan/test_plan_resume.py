"""Resume properties: specs/resume-state.md invariants R1-R6 over random kills and shapes."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.plan import Plan, PlanParams, build_plan, plan_to_state
from tests.helpers.plan_strategies import (
    all_samples,
    assert_equal_steps,
    consumed_real,
    consumer_samples,
    epoch_ids,
    kill_offsets,
    plan_params,
    shard_sizes,
)

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FINGERPRINT = "xxh64:0123456789abcdef"


def save_and_restore(plan: Plan, offsets: list[int]) -> dict[str, object]:
    """R1: the state survives a JSON round trip unchanged."""
    state = plan_to_state(plan, offsets, FINGERPRINT)
    restored: dict[str, object] = json.loads(json.dumps(state))
    assert restored == state
    return restored


@st.composite
def resume_chain(draw: st.DrawFn, /) -> tuple[list[int], list[PlanParams], list[int]]:
    """Shard sizes, 2-4 params of one epoch (each next one sometimes equal), kill seeds."""
    sizes = draw(shard_sizes(max_samples=30_000))
    first = draw(plan_params(sum(sizes)))
    chain = [first]
    for _ in range(draw(st.integers(1, 3))):
        same = draw(st.booleans()) and draw(st.booleans())
        chain.append(chain[-1] if same else draw(plan_params(sum(sizes), epoch=first.epoch)))
    seeds = draw(st.lists(st.integers(0, 2**32 - 1), min_size=len(chain), max_size=len(chain)))
    return sizes, chain, seeds


@PROPERTY
@given(
    shard_sizes(max_samples=30_000).flatmap(lambda s: st.tuples(st.just(s), plan_params(sum(s)))),
    st.integers(0, 2**32 - 1),
)
def test_same_topology_resume_continues_exactly(
    case: tuple[list[int], PlanParams], seed: int
) -> None:
    """R2: same params -> the same plan, start_offsets = saved offsets, the exact rest."""
    sizes, params = case
    plan = build_plan(sizes, params)
    offsets = kill_offsets(plan, seed)
    resumed = build_plan(sizes, params, save_and_restore(plan, offsets))
    assert resumed.start_offsets == tuple(offsets)
    assert resumed.level == plan.level == 0
    for consumer, offset in enumerate(offsets):
        rest = consumer_samples(resumed, consumer, offset)
        whole = consumer_samples(plan, consumer)
        assert np.array_equal(rest.ids, whole.ids[offset:])
        assert np.array_equal(rest.padded, whole.padded[offset:])


@PROPERTY
@given(resume_chain())
def test_chained_resumes_are_exactly_once(
    case: tuple[list[int], list[PlanParams], list[int]],
) -> None:
    """R3: consumed + the last plan's real samples = every sample once, minus its drop;
    R4: equal steps under the new params at every level; R5: chains of 2-4 levels;
    R2 at every level: a same-params resume continues exactly; R10: a level whose every
    consumer ran to its end yields nothing more on any params (its drop stays dropped)."""
    sizes, chain, seeds = case
    plan = build_plan(sizes, chain[0])
    consumed = [np.zeros(0, dtype=np.int64)]
    for params, seed in zip(chain[1:], seeds, strict=False):
        offsets = kill_offsets(plan, seed)
        consumed.append(consumed_real(plan, offsets))
        state = save_and_restore(plan, offsets)
        old_remaining = (
            sum(max(plan.num_real_samples(c) - offset, 0) for c, offset in enumerate(offsets))
            + plan.num_dropped
        )
        same = params.same_partition(plan.params)
        finished = all(offset >= plan.num_samples(c) for c, offset in enumerate(offsets))
        resumed = build_plan(sizes, params, state)
        if same:
            assert resumed.start_offsets == tuple(offsets) and resumed.level == plan.level
        else:
            assert resumed.start_offsets == (0,) * resumed.num_consumers
            assert resumed.level == plan.level + 1
            assert resumed.num_source_samples == old_remaining  # R3: the remainder's size
            if finished:  # R10: the epoch is over; the remainder (the old drop) is this level's drop
                assert resumed.steps_per_rank == 0 and resumed.num_dropped == old_remaining
            else:
                assert_equal_steps(resumed, old_remaining)  # R4
        plan = resumed
    final = [consumer_samples(plan, c, plan.start_offsets[c]) for c in range(plan.num_consumers)]
    trained = np.concatenate(consumed + [out.ids[~out.padded] for out in final])
    assert len(np.unique(trained)) == len(trained)  # R3: nothing twice
    assert len(trained) == sum(sizes) - plan.num_dropped  # R3: nothing lost but the drop
    pads = sum(int(out.padded.sum()) for out in final)
    assert pads <= plan.num_padded


@PROPERTY
@given(resume_chain())
def test_elastic_remainder_keeps_old_order(
    case: tuple[list[int], list[PlanParams], list[int]],
) -> None:
    """R3: the remainder is each old consumer's unconsumed real samples in their old order,
    then the old drop, re-split contiguously and never reshuffled."""
    sizes, chain, seeds = case
    old = build_plan(sizes, chain[0])
    params = PlanParams(
        **(chain[-1].to_dict() | {"epoch": chain[0].epoch, "seed": chain[0].seed + 1})
    )
    offsets = kill_offsets(old, seeds[0])
    expected = []
    for consumer, out in enumerate(all_samples(old)):
        real = out.ids[~out.padded]
        expected.append(real[min(offsets[consumer], len(real)) :])
    new = build_plan(sizes, params, save_and_restore(old, offsets))
    dropped = epoch_ids(sizes, chain[0])[sum(sizes) - old.num_dropped :]
    remainder = np.concatenate(expected + [dropped])
    yielded = np.concatenate(
        [consumer_samples(new, c).ids[: new.num_real_samples(c)] for c in range(new.num_consumers)]
    )
    assert np.array_equal(yielded, remainder[: len(yielded)])
    assert len(remainder) == new.num_source_samples


def test_resume_at_epoch_end_and_start() -> None:
    """R3: resuming after everything was consumed leaves an empty epoch; resuming at 0
    elastically re-splits the whole epoch."""
    sizes = [7, 0, 11, 5]
    params = PlanParams(world_size=2, num_workers=2, batch_size=2, tail="pad")
    plan = build_plan(sizes, params)
    done = [plan.num_samples(c) for c in range(plan.num_consumers)]
    other = PlanParams(world_size=3, batch_size=2, tail="pad")
    finished = build_plan(sizes, other, plan_to_state(plan, done, FINGERPRINT))
    assert finished.num_source_samples == 0 and finished.steps_per_rank == 0
    fresh = build_plan(sizes, other, plan_to_state(plan, [0] * plan.num_consumers, FINGERPRINT))
    assert fresh.num_source_samples == 23 and fresh.steps_per_rank == 4
    assert fresh.num_padded == 1
