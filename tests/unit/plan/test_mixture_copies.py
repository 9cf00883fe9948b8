"""Copy numbers of an unweighted mixture source that repeats inside an epoch (specs/mixture.md
MX2): stream position ``s`` of a source whose epoch starts at cursor ``P`` is copy
``(s - P) // N``, over kill points, elastic resumes, segmented epochs and new mixes."""

from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanParams
from shardkit.plan.mixture.spec import MixSource, MixSpec
from shardkit.plan.mixture.state import mixture_plan
from tests.helpers import mixture_strategies as ms
from tests.helpers import mixture_weights_reference as ref

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def repeating_specs(draw: st.DrawFn, /, max_changes: int = 2) -> MixSpec:
    """:func:`ms.mix_specs` whose first source is tiny (1-8 samples) and heavy, so it repeats
    whole passes in an epoch of 20-300 samples."""
    spec = draw(ms.mix_specs(max_epoch_samples=300, max_changes=max_changes))
    sizes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3).filter(lambda s: 0 < sum(s)))
    tiny = MixSource(spec.sources[0].name, np.array(sizes), draw(st.sampled_from([1.0, 7.0])), "fp-tiny")
    total = max([draw(st.integers(20, 300))] + [step.first_sample + 1 for step in spec.schedule])
    return replace(spec, sources=(tiny,) + spec.sources[1:], samples_per_epoch=total)


def copies_by_sample(elements: collections.Counter[ref.Element]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = collections.defaultdict(list)
    for sample, copy in elements.elements():
        found[sample].append(copy)
    return {sample: sorted(copies) for sample, copies in found.items()}


@PROPERTY
@given(ref.resume_chains(repeating_specs))
def test_repeats_of_an_unweighted_source_have_distinct_copies_on_any_topology(
        case: tuple[MixSpec, list[PlanParams], list[int]]) -> None:
    """MX2: over a chain of same-topology and elastic resumes (ranks, workers, batch size,
    tail, window), both compositions and segmented epochs, the elements delivered at every level
    plus the last plan's rest and dropped tail are each taken once; the copies of a sample taken
    ``m`` times are exactly ``0..m-1``, and each is the copy of its stream position (the
    reference), so whatever topology delivers a repeat it carries the same copy number."""
    spec, chain, _ = case
    got = ref.elements_over_chain(case)
    assert got == ref.expected_elements(spec, chain[0])
    assert all(count == 1 for count in got.values())
    assert all(copies == list(range(len(copies))) for copies in copies_by_sample(got).values())
    counts = spec.counts(chain[0].epoch)
    if counts[0] > spec.sources[0].num_samples:  # the tiny source repeated: some copy > 0
        assert max(copy for _, copy in got) > 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(repeating_specs(max_changes=0), st.data())
def test_a_new_mix_now_keeps_every_repeat_distinct(spec: MixSpec, data: st.DataObject) -> None:
    """MX2 with MX12: after a new mix now, the untaken elements keep their copy numbers and the
    stream after the epoch continues them: every element delivered is distinct and is one of
    the source's stream positions ``cursor .. cursor + count`` (copies counted from ``cursor``)."""
    first, got, state = ref.new_mix_now(spec, data, [0.0, 0.3, 2.0, 9.0])
    assert all(count == 1 for count in got.values())
    owners = ms.source_of(spec, [sample for sample, _ in got]) if got else np.zeros(0, dtype=np.int64)
    for i, entry in enumerate(state["sources"]):
        expected = ref.stream_elements(spec, i, first, entry["cursor"], entry["cursor"] + entry["count"],
                                       entry["cursor"])
        mine = {element for element, owner in zip(got, owners, strict=True) if owner == i}
        assert mine <= set(expected)


def test_a_tiny_source_repeats_with_copies_zero_to_m() -> None:
    """MX2 example: 3 samples asked for 20 times in an epoch; each sample's copies are 0..m-1
    (m = 6 or 7), and a source larger than its share keeps copy 0 for every sample."""
    spec = MixSpec((MixSource("tiny", np.array([3]), 1.0, "fp-tiny"),
                    MixSource("big", np.array([50, 50]), 4.0, "fp-big")), 100, "random")
    plan = mixture_plan(spec, PlanParams(seed=3, world_size=2, num_workers=2, batch_size=4, shuffle_window=16))
    got = collections.Counter(ref.rest_and_dropped(plan))
    tiny = {sample: copies for sample, copies in copies_by_sample(got).items() if sample < 3}
    assert sorted(len(c) for c in tiny.values()) == [6, 7, 7]
    assert all(copies == list(range(len(copies))) for copies in tiny.values())
    assert {copy for sample, copy in got if sample >= 3} == {0}
