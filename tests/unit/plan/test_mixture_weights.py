"""Per-sample weights inside mixture sources: specs/mixture.md MX17 over kill points, elastic
changes, segmented epochs, new mixes and refusals."""

from __future__ import annotations

import collections
import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError, StateError
from shardkit.plan import PlanParams
from shardkit.plan.mixture.spec import MixSource, MixSpec
from shardkit.plan.mixture.state import mixture_plan, mixture_to_state, resume_mixture
from shardkit.plan.mixture.weights import pass_length, pass_multiplicities
from shardkit.plan.sample_weights import SampleWeights
from tests.helpers import mixture_strategies as ms
from tests.helpers import mixture_weights_reference as ref

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(ref.resume_chains(lambda: ref.weighted_specs(max_changes=2)))
def test_weighted_sources_deliver_the_epoch_multiset_across_resume_chains(
        case: tuple[MixSpec, list[PlanParams], list[int]]) -> None:
    """MX17 with MX5: over any chain of same-topology and elastic resumes (ranks, workers, batch
    size, tail, window), both compositions and segmented epochs, the elements delivered at every
    level plus the last plan's rest and dropped tail are exactly the plan's multiset of
    ``(sample, copy)`` - weighted passes expanded by the reference - and every element of a
    weighted source is distinct (its own copy number)."""
    spec, chain, _ = case
    got = ref.elements_over_chain(case)
    expected = ref.expected_elements(spec, chain[0])
    assert got == expected
    weighted = [i for i, s in enumerate(spec.sources) if s.sample_weights is not None]
    owners = ms.source_of(spec, [sample for sample, _ in got]) if got else np.zeros(0, dtype=np.int64)
    assert all(count == 1 for (element, count), owner in zip(got.items(), owners, strict=True) if owner in weighted)


@PROPERTY
@given(ref.weighted_specs(), st.integers(0, 2**20), st.integers(0, 50))
def test_every_weighted_pass_rounds_each_sample_within_one_and_sums_exactly(
        spec: MixSpec, seed: int, pass_index: int) -> None:
    """MX17: pass ``p`` of a weighted source holds ``L`` elements (its samples of weight > 0);
    each ``m_j`` is ``floor`` or ``ceil`` of ``w_j L / sum(w)``, weight 0 never appears."""
    for source in spec.sources:
        if source.sample_weights is None:
            continue
        weights = source.sample_weights
        m = pass_multiplicities(weights, seed, source.name, pass_index)
        length = pass_length(weights)
        target = weights.weights.astype(np.float64) * length / weights.total
        assert int(m.sum()) == length == int(np.count_nonzero(weights.weights))
        assert np.all(m >= np.floor(target - 1e-9)) and np.all(m <= np.ceil(target + 1e-9))
        assert not m[weights.weights == 0].any()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ref.weighted_specs(max_epoch_samples=300), st.data())
def test_a_new_mix_now_takes_each_weighted_element_at_most_once(spec: MixSpec, data: st.DataObject) -> None:
    """MX17 with MX12: re-planning the rest with new weights takes the epoch's untaken elements,
    then the stream after the epoch: every element is distinct and the elements of a weighted
    source are its stream positions ``cursor .. cursor + count`` (the remixed state's count)."""
    first, got, state = ref.new_mix_now(spec, data, [0.0, 0.3, 2.0])
    for i, entry in enumerate(state["sources"]):
        expected = ref.stream_elements(spec, i, first, entry["cursor"], entry["cursor"] + entry["count"],
                                       entry["cursor"])
        mine = collections.Counter({e: c for e, c in got.items() if ms.source_of(spec, [e[0]])[0] == i})
        if spec.sources[i].sample_weights is not None:
            assert all(c == 1 for c in mine.values())
            assert set(mine) <= set(expected)  # skipped untaken elements are not delivered (MX12)


def test_equal_weights_are_the_unweighted_stream() -> None:
    """MX17: all-equal weights give every sample multiplicity 1 in every pass, so the mixture
    delivers exactly the samples (in the same order) of the unweighted one; copies count passes."""
    plain = MixSpec((MixSource("web", np.array([20, 20]), 0.7, "fp-web"),
                     MixSource("code", np.array([6]), 0.3, "fp-code")), 60, "stratified")
    weighted = replace(plain, sources=(replace(plain.sources[0], sample_weights=SampleWeights(np.full(40, 3.0),
                                                                                              [20, 20])),
                                       plain.sources[1]))
    params = PlanParams(seed=5, world_size=2, num_workers=2, batch_size=3, shuffle_window=8)
    a, b = mixture_plan(plain, params), mixture_plan(weighted, params)
    for consumer in range(a.num_consumers):
        ids = [[i for i, _ in ref.consumer_elements(p, consumer)[0]] for p in (a, b)]
        assert ids[0] == ids[1]
    assert plain.digest(0) != weighted.digest(0)  # the state still names the weights


def test_a_heavy_sample_gets_distinct_copies_across_passes() -> None:
    """MX17/SW8: a small weighted source read for several passes in one epoch: each copy of its
    heavy sample has its own copy number (so its own ctx.rng())."""
    weights = SampleWeights([1.0, 0.0, 6.0, 1.0], [2, 2])
    spec = MixSpec((MixSource("tiny", np.array([2, 2]), 1.0, "fp", sample_weights=weights),), 40)
    plan = mixture_plan(spec, PlanParams(seed=1, batch_size=4))
    elements = [e for c in range(plan.num_consumers) for e in ref.consumer_elements(plan, c)[0]]
    heavy = [copy for sample, copy in elements if sample == 2]
    assert len(heavy) == len(set(heavy)) and 1 not in {sample for sample, _ in elements}
    assert len(heavy) >= 13 * 2  # 2 or 3 copies in each of the 13 whole passes (L = 3, 2.25 expected)


def saved_state(spec: MixSpec) -> dict[str, Any]:
    plan = mixture_plan(spec, PlanParams(world_size=2, batch_size=3))
    return ref.roundtrip(mixture_to_state(spec, plan, [3, 3]))


def weighted_spec(values: list[float] | None = None) -> MixSpec:
    values = values if values is not None else [1.0, 2.0, 0.0, 5.0] * 10
    web = MixSource("web", np.array([20, 20]), 0.7, "fp-web", sample_weights=SampleWeights(values, [20, 20], "q"))
    return MixSpec((web, MixSource("code", np.array([6]), 0.3, "fp-code")), 60)


def test_the_state_names_the_weights_and_a_change_is_refused_by_name() -> None:
    """MX17/MX7: a weighted source's state entry holds its weights' fingerprint (version 2);
    other weights, or none, are refused naming the source."""
    state = saved_state(weighted_spec())
    assert state["version"] == 2 and state["sources"][0]["sample_weights"].startswith("blake2b:")
    assert "sample_weights" not in state["sources"][1]
    params = PlanParams(world_size=3, batch_size=2)
    resume_mixture(weighted_spec(), params, state)  # the same weights resume
    with pytest.raises(StateError, match=r"'web'.*sample weights changed"):
        resume_mixture(weighted_spec([1.0] * 40), params, state)
    plain = replace(weighted_spec(), sources=(replace(weighted_spec().sources[0], sample_weights=None),
                                              weighted_spec().sources[1]))
    with pytest.raises(StateError, match=r"'web'.*sample weights changed"):
        resume_mixture(plain, params, state)
    with pytest.raises(StateError, match=r"'web'.*sample weights changed"):
        resume_mixture(weighted_spec(), params, saved_state(plain))
    assert "sample_weights" not in json.dumps(saved_state(plain))  # unweighted states are unchanged


def test_weights_for_other_shards_are_refused_and_weights_in_tokens_are_not() -> None:
    with pytest.raises(PlanError, match="'web'.*shard sizes"):
        MixSource("web", np.array([20, 20]), 1.0, sample_weights=SampleWeights([1.0] * 40, [40]))
    web = replace(weighted_spec().sources[0], num_tokens=100)
    assert MixSpec((web,), 10, unit="tokens").counts(0).tolist() == [10]  # MX13 over MX17: a token total
