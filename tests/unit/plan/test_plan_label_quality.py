"""P14: distinct labels per batch against a uniform shuffle, and the loader's one warning."""

from __future__ import annotations

import logging
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.format import Manifest
from shardkit.plan import PlanParams, build_plan
from shardkit.plan.params import DEFAULT_SPREAD
from shardkit.plan.quality import label_quality, shard_mixing, uniform_distinct, warn_if_unshuffled


@settings(deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.integers(1, 45))
def test_uniform_distinct_is_the_exact_expectation(values: list[int], batch: int) -> None:
    labels = np.array(values)
    n, b = len(labels), min(batch, len(labels))
    counts = np.unique(labels, return_counts=True)[1]
    want = sum(1 - comb(n - int(c), b) / comb(n, b) for c in counts)
    assert uniform_distinct(labels, batch) == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_sorted_labels_are_poor_and_shuffled_ones_are_not() -> None:
    sizes = [100] * 200  # 20,000 samples, 100 labels sorted: 1 label per shard
    sorted_labels = np.arange(20_000) // 200
    params = PlanParams(world_size=2, num_workers=2, batch_size=64, shuffle_window=1024)
    plan = build_plan(sizes, params)
    poor = label_quality(plan, sorted_labels, "label", num_batches=5)
    assert poor.poor and poor.ratio < 0.3 and poor.num_batches == 20
    mixed = label_quality(plan, np.random.default_rng(0).permutation(sorted_labels), "label", num_batches=5)
    assert not mixed.poor and mixed.ratio > 0.95


def manifest(order: dict[str, object] | None, schema: dict[str, object], fingerprint: str) -> Manifest:
    return Manifest(shards=(), schema=schema, fingerprint=fingerprint, order=order)


def test_loader_warning_once_for_a_labelled_unshuffled_dataset(caplog: pytest.LogCaptureFixture) -> None:
    """P14/P20: said once per dataset, only when it was packed in source order, declares a label
    field and its batches draw from few shards."""
    plan = build_plan([100] * 200, PlanParams(batch_size=32, shuffle_window=256))  # ~3 shards a batch
    caplog.set_level(logging.WARNING, logger="shardkit.plan.quality")
    labelled = {"label": {"type": "int"}, "jpg": {"type": "bytes"}}
    warn_if_unshuffled(manifest({"shuffled": True, "method": "m", "seed": 0}, labelled, "fp-a"), plan)
    warn_if_unshuffled(manifest(None, labelled, "fp-b"), plan)  # not recorded: no claim
    warn_if_unshuffled(manifest({"shuffled": False}, {"jpg": {"type": "bytes"}}, "fp-c"), plan)
    assert caplog.records == []
    for _ in range(3):
        warn_if_unshuffled(manifest({"shuffled": False}, labelled, "fp-d"), plan)
    assert len(caplog.records) == 1 and "--quality label" in caplog.records[0].getMessage()


def test_no_warning_when_the_plan_mixes_enough_shards(caplog: pytest.LogCaptureFixture) -> None:
    """P20: the same source-order dataset read with the default spread over 8x4 consumers draws
    a batch from more than half the shards a uniform shuffle's would: nothing to say."""
    sizes = [214] * 1000
    caplog.set_level(logging.WARNING, logger="shardkit.plan.quality")
    labelled = {"label": {"type": "int"}}
    spread = build_plan(sizes, PlanParams(world_size=8, num_workers=4, batch_size=256, spread=DEFAULT_SPREAD))
    found, uniform = shard_mixing(spread)
    assert found >= 0.5 * uniform and uniform > 200
    warn_if_unshuffled(manifest({"shuffled": False}, labelled, "fp-e"), spread)
    assert caplog.records == []
    plain = build_plan(sizes, PlanParams(world_size=8, num_workers=4, batch_size=256))
    found, uniform = shard_mixing(plain)
    assert found < 0.25 * uniform
    warn_if_unshuffled(manifest({"shuffled": False}, labelled, "fp-f"), plain)
    assert len(caplog.records) == 1 and "shards on average" in caplog.records[0].getMessage()
