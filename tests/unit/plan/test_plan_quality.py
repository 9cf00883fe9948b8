"""Shuffle-quality measurement: specs/partition.md P12 and its measured table."""

from __future__ import annotations

import json

import pytest

from shardkit.errors import PlanError
from shardkit.plan import PlanParams, build_plan, shuffle_stats

SIZES = [1000] * 200  # 2e5 samples, 200 shards of 1000


def stats_for(shuffle: bool, window: int) -> dict[str, float | int]:
    params = PlanParams(
        world_size=2, num_workers=2, batch_size=64, shuffle=shuffle, shuffle_window=window
    )
    return shuffle_stats(build_plan(SIZES, params), num_batches=20).to_dict()


def test_no_shuffle_reads_sequentially() -> None:
    """P12: without shuffle neighbours are sequential (correlation 1), ~1 shard per batch."""
    stats = stats_for(False, 8192)
    assert stats["num_batches"] == 4 * 20
    assert stats["neighbour_correlation"] == pytest.approx(1.0)
    assert stats["max_shards_per_batch"] <= 2


def test_bigger_window_mixes_more_shards() -> None:
    """P12: a window spanning many shards decorrelates neighbours and mixes shards per batch."""
    small, large = stats_for(True, 64), stats_for(True, 8192)
    assert large["mean_shards_per_batch"] > small["mean_shards_per_batch"]
    assert abs(large["neighbour_correlation"]) < 0.1 < small["neighbour_correlation"]
    assert large["mean_shards_per_window"] >= 8
    assert json.loads(json.dumps(large)) == large  # plain JSON: what `shardkit plan --json` prints


def test_bad_arguments() -> None:
    """P12: num_batches must be positive; a plan with nothing to yield reports zeros."""
    plan = build_plan(SIZES, PlanParams())
    with pytest.raises(PlanError, match="num_batches"):
        shuffle_stats(plan, num_batches=0)
    empty = shuffle_stats(build_plan([], PlanParams()), num_batches=3)
    assert empty.num_batches == 0
