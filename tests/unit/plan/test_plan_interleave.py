"""Read-time interleaving (specs/partition.md P13-P15): PlanParams(interleave=k) keeps every
guarantee of the plain window shuffle (P1-P5, P8, P9, resume R2-R5) and mixes more shards.
P1-P5, P9 and R2-R5 are checked for every read-time knob in test_plan_knobs.py."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from shardkit.plan import PlanParams, build_plan
from shardkit.plan.quality import distinct_per_batch
from tests.helpers import plan_strategies as ps

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(ps.interleaved())
def test_lanes_are_read_in_order_and_windows_are_bounded(case: tuple[list[int], PlanParams]) -> None:
    """P8: a consumer still owns one contiguous range; P13: windows output <= shuffle_window
    samples drawn from at most k runs of it, each lane read front to back across windows;
    shards_of lists exactly the shards the windows decode, in first-read order."""
    sizes, params = case
    plan = build_plan(sizes, params)
    position = np.empty(sum(sizes), dtype=np.int64)
    position[ps.epoch_ids(sizes, params)] = np.arange(sum(sizes))
    offsets = plan.shard_offsets
    for consumer in range(min(plan.num_consumers, 12)):
        decoded, first_read = [], []
        for window in plan.consumer_windows(consumer):
            assert window.num_samples <= params.shuffle_window
            spans = [s for s in window.spans if not s.padded]
            where = np.concatenate([position[offsets[s.shard_index] + np.arange(s.start, s.end)]
                                    for s in spans] or [np.zeros(0, dtype=np.int64)])
            runs = 1 + int(np.count_nonzero(np.diff(where) != 1)) if len(where) else 0
            assert runs <= params.interleave
            decoded.append(where)
            first_read.extend(s.shard_index for s in window.spans)
        real = np.sort(np.concatenate(decoded)) if decoded else np.zeros(0, dtype=np.int64)
        if len(real):
            assert np.array_equal(real, np.arange(real[0], real[0] + len(real)))  # P8
        _, first = np.unique(first_read, return_index=True)
        in_order = tuple(int(first_read[i]) for i in np.sort(first))
        assert set(plan.shards_of(consumer)) == set(in_order)
        if plan.num_real_samples(consumer) == plan.num_samples(consumer):  # pads: Cyclic's order
            assert plan.shards_of(consumer) == in_order


def test_interleave_1_is_the_plain_plan_and_old_states_still_load() -> None:
    """P15: interleave=1 (the default) leaves plans and saved states exactly as before."""
    ps.check_default_is_plain("interleave")


def test_interleave_mixes_more_classes_of_a_sorted_dataset() -> None:
    """P14: sorted 1,000-class data, 214 samples per shard, 8x4 consumers, batch 256: 64 lanes
    see about twice the distinct classes per batch of the plain window (measured 42 -> 83)."""
    sizes = [214] * 6000
    labels = np.arange(sum(sizes)) // 1284
    plain, mixed = (
        distinct_per_batch(build_plan(sizes, PlanParams(world_size=8, num_workers=4, batch_size=256,
                                                          interleave=lanes)), labels, num_batches=4)
        for lanes in (1, 64)
    )
    assert mixed >= 1.8 * plain
