"""Global order over other epoch sources (specs/partition.md P27-P31): a mixture's mixed sequence
(specs/mixture.md) and a weighted epoch (specs/sample-weights.md) are sequences like a dataset's,
so the same component cuts them into global batches."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanParams
from shardkit.plan.global_order.state import build_global_plan
from shardkit.plan.mixture.spec import MixSpec
from shardkit.plan.mixture.state import mixed_sequence, mixture_plan, mixture_shard_sizes
from shardkit.plan.sample_weights import SampleWeights
from shardkit.plan.weighted_sequence import weighted_plan, weighted_sequence
from tests.helpers.global_order import (
    Topology,
    assembled,
    fixed_of,
    on,
    reference_batches,
    reference_ids,
    saved,
    topologies,
)
from tests.helpers.mixture_strategies import expected_multiset, mix_specs

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def sequence_of(spec: MixSpec):  # type: ignore[no-untyped-def]
    return lambda sizes, params: mixed_sequence(spec, params)


@PROPERTY
@given(mix_specs(max_changes=1), st.integers(0, 2**20), st.integers(0, 3), st.booleans(),
       st.integers(1, 24).flatmap(lambda g: st.lists(topologies(g), min_size=2, max_size=4)),
       st.lists(st.floats(0, 1), min_size=4, max_size=4))
def test_a_mixture_in_global_order_is_the_same_on_every_topology_and_resume(
        spec: MixSpec, seed: int, epoch: int, shuffle: bool, chain: list[Topology], kills: list[float]) -> None:
    """P27-P31 for a mixture: the 1-process mixed sequence cut into B_g, the same for every shape,
    resumed across shapes bit for bit; the epoch's multiset (MX1) once, less the drop."""
    params = PlanParams(seed=seed, epoch=epoch, shuffle=shuffle, shuffle_window=16, tail="pad", order="global")
    sizes = mixture_shard_sizes(spec).tolist()
    fixed = fixed_of(params, chain[0])
    plan_of = functools.partial(mixture_plan, spec)
    expected = reference_batches(reference_ids(sizes, fixed, plan_of), 0, fixed.batch_size, "pad")
    received: list[tuple[tuple[int, ...], tuple[bool, ...]]] = []
    state = None
    for level, shape in enumerate(chain):
        plan = build_global_plan(sizes, on(params, shape), state, shape.group, sequence_of(spec))
        batches = assembled(plan)
        if level == 0:
            assert batches == expected
        count = len(batches) if level == len(chain) - 1 else int(kills[level] * len(batches) + 0.5)
        received += batches[:count]
        state = saved(plan, count)
    assert received == expected
    real = Counter(i for ids, pads in received for i, pad in zip(ids, pads, strict=True) if not pad)
    assert real == expected_multiset(spec, replace(params, world_size=1))


@PROPERTY
@given(st.lists(st.integers(0, 30), min_size=1, max_size=8), st.integers(0, 2**20), st.integers(0, 300),
       st.integers(1, 24).flatmap(lambda g: st.lists(topologies(g), min_size=2, max_size=3)), st.data())
def test_a_weighted_epoch_in_global_order_is_the_same_on_every_topology(
        sizes: list[int], seed: int, total: int, shapes: list[Topology], data: st.DataObject) -> None:
    """P27-P29 for sample weights: the 1-process weighted sequence (SW3) cut into B_g, the same
    for every shape, copy numbers (SW8) carried to the rows."""
    if sum(sizes) == 0:
        sizes = [*sizes, 1]
    weights = SampleWeights(data.draw(st.lists(st.sampled_from([0.0, 0.3, 1.0, 4.0]), min_size=sum(sizes),
                                               max_size=sum(sizes)).filter(any)), sizes)
    params = PlanParams(seed=seed, shuffle_window=16, tail="pad", order="global")
    fixed = fixed_of(params, shapes[0])
    plan_of = functools.partial(weighted_plan, weights, total)
    expected = reference_batches(reference_ids(sizes, fixed, plan_of), 0, fixed.batch_size, "pad")
    alone = plan_of(replace(fixed, order="shard", tail="pad"))
    copies = sorted(pair for w in alone.consumer_windows(0) for pair, pad in zip(zip(
        w.global_indices(alone.shard_offsets).tolist(), (np.zeros(w.num_samples, dtype=np.int64)
        if w.copies is None else w.copies).tolist(), strict=True), w.padded_mask().tolist(), strict=True) if not pad)
    for shape in shapes:
        plan = build_global_plan(sizes, on(params, shape), None, shape.group,
                                 lambda _, p: weighted_sequence(weights, total, p))
        assert assembled(plan) == expected
        rows = [plan.global_batch_rows(g) for g in range(plan.num_global_batches)]
        found = sorted((int(i), int(k)) for r in rows for i, k, pad in zip(
            r.global_indices(plan.shard_offsets), r.copy, r.padded, strict=True) if not pad)
        assert found == copies
        batch, workers = plan.params.batch_size, plan.params.workers_per_rank
        for consumer in range(plan.num_consumers):  # a consumer's window carries its rows' copy numbers
            rank = consumer // workers
            for j, window in enumerate(plan.consumer_windows(consumer)):
                mine = rows[plan.global_batch_index(consumer, j)].copy[rank * batch:(rank + 1) * batch]
                got = np.zeros(batch, dtype=np.int64) if window.copies is None else window.copies
                assert got.tolist() == mine.tolist()
