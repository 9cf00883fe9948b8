"""Global order over a mixture (specs/partition.md P27-P31 with specs/mixture.md): the mixed
sequence is a sequence like a dataset's, so the same component cuts it into global batches."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanParams
from shardkit.plan.global_state import build_global_plan
from shardkit.plan.mixture import MixSpec
from shardkit.plan.mixture_state import mixed_sequence, mixture_plan, mixture_shard_sizes
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
