"""P4 scale: 1e9 samples, 1e5 shards, 4096 consumers (specs/partition.md P9, resume R6).

Asserts counts and a memory ceiling only, never wall time (timings live in benchmarks/).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from shardkit.plan import PlanParams, build_plan, plan_to_state
from shardkit.plan.params import DEFAULT_SPREAD

NUM_SHARDS = 100_000
MIB = 1 << 20


def skewed_sizes() -> np.ndarray:
    """1e5 shards averaging 1e4 samples, from 0 to ~2e4, summing to exactly 1e9."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 20_000, NUM_SHARDS)
    sizes[-1] += 1_000_000_000 - int(sizes.sum())
    return sizes


@pytest.mark.parametrize("spread", [1, DEFAULT_SPREAD])
def test_plan_seek_and_elastic_replan_at_scale(spread: int) -> None:
    """P9: seek is O(window), R6: elastic re-plan is O(shards + consumers) - memory stays
    far below 1 GiB and no per-sample array over the dataset is built (P18: spread too)."""
    sizes = skewed_sizes()
    assert int(sizes.sum()) == 10**9 and sizes.min() >= 0
    params = PlanParams(seed=7, epoch=3, world_size=512, num_workers=8, batch_size=32, spread=spread)
    tracemalloc.start()
    try:
        plan = build_plan(sizes, params)
        assert plan.num_consumers == 4096
        assert plan.steps_per_rank == 10**9 // (512 * 32)
        assert plan.num_dropped == 10**9 - 512 * 32 * plan.steps_per_rank
        last = plan.num_consumers - 1
        middle = plan.num_samples(last) // 2 // 32 * 32
        window = next(plan.consumer_windows(last, middle))
        assert 0 < window.num_samples <= params.shuffle_window
        assert window.num_decoded <= params.shuffle_window
        assert 1 <= len(plan.shards_of(last)) <= 100 * spread

        offsets = [plan.num_samples(c) // 2 // 32 * 32 for c in range(plan.num_consumers)]
        state = plan_to_state(plan, offsets, "xxh64:scale")
        remaining = sum(plan.num_real_samples(c) - o for c, o in enumerate(offsets))
        new_params = PlanParams(seed=7, epoch=3, world_size=300, num_workers=6, batch_size=48, spread=spread)
        elastic = build_plan(sizes, new_params, state)
        assert elastic.level == 1 and elastic.num_consumers == 1800
        assert elastic.num_source_samples == remaining + plan.num_dropped
        assert elastic.steps_per_rank == elastic.num_source_samples // (300 * 48)
        seek = elastic.num_samples(1799) // 2
        window = next(elastic.consumer_windows(1799, seek))
        assert 0 < window.num_samples <= params.shuffle_window

        again = build_plan(sizes, new_params, plan_to_state(elastic, [48] * 1800, "xxh64:scale"))
        assert again.start_offsets == (48,) * 1800 and again.level == 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * MIB, f"peak traced memory {peak / MIB:.0f} MiB"
