"""Mixture resume: specs/mixture.md MX5-MX9 over kill points, elastic changes and new mixes."""

from __future__ import annotations

import collections
import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import StateError
from shardkit.plan import Plan, PlanParams
from shardkit.plan.mixture.spec import MixSource, MixSpec
from shardkit.plan.mixture.state import mixture_plan, mixture_to_state, resume_mixture
from tests.helpers import mixture_strategies as ms
from tests.helpers.plan_strategies import all_samples, assert_level_steps, kill_offsets

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    restored: dict[str, Any] = json.loads(json.dumps(state))
    assert restored == state
    return restored


def per_source(spec: MixSpec, ids: list[int]) -> list[int]:
    counts = np.bincount(ms.source_of(spec, ids), minlength=len(spec.sources)) if ids else np.zeros(len(spec.sources))
    return [int(c) for c in counts]


def run_chain(spec: MixSpec, plan: Plan, chain: list[PlanParams], seeds: list[int],
              consumed: list[int]) -> tuple[Plan, MixSpec]:
    """Kill ``plan`` at random offsets and resume under each params of ``chain`` in turn."""
    later = spec
    for params, seed in zip(chain, seeds, strict=True):
        offsets = kill_offsets(plan, seed)
        got = ms.delivered(plan, offsets)
        consumed.extend(got)
        state = roundtrip(mixture_to_state(spec, plan, offsets, per_source(spec, consumed)))
        assert [s["consumed"] for s in state["sources"]] == per_source(spec, consumed)  # MX9
        before = plan
        plan, later = resume_mixture(spec, params, state)
        if params.same_partition(before.params):
            assert plan.start_offsets == tuple(offsets)
        else:
            assert_level_steps(before, offsets, plan)
    return plan, later


@st.composite
def chains(draw: st.DrawFn, /) -> tuple[MixSpec, list[PlanParams], list[int]]:
    spec = draw(ms.mix_specs(max_changes=2))  # some epochs change their mix inside (MX11)
    first = draw(ms.mix_params())
    chain = [first]
    for _ in range(draw(st.integers(1, 3))):
        same = draw(st.booleans())
        chain.append(chain[-1] if same else draw(ms.mix_params(epoch=first.epoch)))
    seeds = draw(st.lists(st.integers(0, 2**32 - 1), min_size=len(chain) - 1, max_size=len(chain) - 1))
    return spec, chain, seeds


@PROPERTY
@given(chains())
def test_any_chain_of_resumes_delivers_the_epoch_multiset(case: tuple[MixSpec, list[PlanParams], list[int]]) -> None:
    """MX5: consumed at every level + the last plan's real samples + its dropped tail equal
    the epoch's multiset exactly, across same-topology and elastic resumes (ranks, workers,
    batch size, tail and window changed), segmented epochs (MX11) included."""
    spec, chain, seeds = case
    plan = mixture_plan(spec, chain[0])
    consumed: list[int] = []
    plan, _ = run_chain(spec, plan, chain[1:], seeds, consumed)
    rest = [int(i) for c, out in enumerate(all_samples(plan))
            for i in out.ids[plan.start_offsets[c]:][~out.padded[plan.start_offsets[c]:]]]
    got = collections.Counter(consumed + rest + ms.dropped_ids(plan))
    assert got == ms.expected_multiset(spec, chain[0])


@st.composite
def new_mixes(draw: st.DrawFn, /) -> tuple[MixSpec, MixSpec, PlanParams, PlanParams, int]:
    """A spec, the same sources under new weights plus maybe a new source, two params."""
    spec = draw(ms.mix_specs(max_epoch_samples=300))
    weights = [0.0 if s.num_samples == 0 else draw(st.sampled_from([0.0, 0.01, 0.5, 3.0])) for s in spec.sources]
    if not any(weights):
        weights = [s.weight for s in spec.sources]
    changed = ms.with_weights(spec, weights)
    if draw(st.booleans()):
        sizes = np.array(draw(st.lists(st.integers(1, 30), min_size=1, max_size=3)))
        changed = replace(changed, sources=changed.sources + (MixSource("added", sizes, 1.0, "fp-added"),))
    changed = replace(changed, samples_per_epoch=draw(st.integers(0, 300)),
                      composition=draw(st.sampled_from(["random", "stratified"])))
    first = draw(ms.mix_params(tail="pad"))
    # the seed and the shuffle flag define each source's order: they stay (MX2)
    params = draw(ms.mix_params(epoch=first.epoch, tail="pad", seed=first.seed, shuffle=first.shuffle))
    return spec, changed, first, params, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(new_mixes(), st.integers(1, 2))
def test_a_new_mix_keeps_the_started_epoch_and_every_pass(
    case: tuple[MixSpec, MixSpec, PlanParams, PlanParams, int], num_later: int
) -> None:
    """MX8: resuming with new weights, an added or a zero-weighted source finishes the started
    epoch exactly as saved, then plans later epochs with the new mix, each source continuing
    its stream: over all epochs, no sample of a source is taken twice before its pass ends."""
    spec, changed, first, params, seed = case
    plan = mixture_plan(spec, first)
    offsets = kill_offsets(plan, seed)
    consumed = ms.delivered(plan, offsets)
    state = roundtrip(mixture_to_state(spec, plan, offsets))
    resumed, later = resume_mixture(changed, params, state)
    rest = [int(i) for c, out in enumerate(all_samples(resumed))
            for i in out.ids[resumed.start_offsets[c]:][~out.padded[resumed.start_offsets[c]:]]]
    assert collections.Counter(consumed + rest) == ms.expected_multiset(spec, first)  # tail="pad"
    taken: dict[str, collections.Counter[int]] = {s.name: collections.Counter() for s in later.sources}
    for name, count in zip(spec.names, expected_multiset_by_source(spec, first), strict=True):
        taken[name].update(count)
    for epoch in range(first.epoch + 1, first.epoch + 1 + num_later):
        epoch_params = replace(params, epoch=epoch)
        multiset = ms.expected_multiset(later, epoch_params)
        plan_now = mixture_plan(later, epoch_params)
        got = collections.Counter(int(i) for out in all_samples(plan_now) for i in out.ids[~out.padded])
        assert got == multiset  # tail="pad": every planned sample is ms.delivered
        for name, count in zip(later.names, expected_multiset_by_source(later, epoch_params), strict=True):
            taken[name].update(count)
    for i, source in enumerate(later.sources):
        ids = ms.pass_ids(later, i, params).tolist()
        old = spec.names.index(source.name) if source.name in spec.names else None
        local = [x - ms.pass_ids(later, i, params).min() for x in ids] if ids else []
        counts = [taken[source.name].get(x, 0) for x in local]
        if old is not None and ids:
            assert max(counts) - min(counts) <= 1, f"{source.name}: a sample repeated before its pass ended"


def expected_multiset_by_source(spec: MixSpec, params: PlanParams) -> list[collections.Counter[int]]:
    """Per source, the epoch's multiset as local (in-source) sample positions."""
    found = []
    for i, (count, cursor) in enumerate(zip(spec.counts(params.epoch), spec.cursors(params.epoch), strict=True)):
        ids = ms.pass_ids(spec, i, params)
        local = ids - (ids.min() if len(ids) else 0)
        found.append(collections.Counter(local[np.arange(cursor, cursor + count) % len(ids)].tolist()) if count
                     else collections.Counter())
    return found


def small_spec() -> MixSpec:
    return MixSpec((MixSource("web", np.array([20, 20]), 0.7, "fp-web"),
                    MixSource("code", np.array([6]), 0.3, "fp-code")), 60)


def saved_state() -> dict[str, Any]:
    spec = small_spec()
    plan = mixture_plan(spec, PlanParams(world_size=2, batch_size=3))
    return roundtrip(mixture_to_state(spec, plan, [3, 3]))


@pytest.mark.parametrize(
    ("edit", "spec", "match"),
    [
        (lambda s: s, replace(small_spec(), sources=small_spec().sources[:1]), "'code'.*not in the mixture"),
        (lambda s: s, replace(small_spec(), sources=(small_spec().sources[0],
                                                      MixSource("code", np.array([6]), 0.3, "fp-new"))),
         "'code'.*source changed"),
        (lambda s: s | {"version": 3}, small_spec(), "newer shardkit"),
        (lambda s: s | {"segments": []}, small_spec(), "version 2 may add"),
        (lambda s: s | {"kind": "shardkit.loader"}, small_spec(), "mixture state"),
        (lambda s: s | {"sources": [s["sources"][0] | {"count": 1}, s["sources"][1]]}, small_spec(),
         "do not follow"),
        (lambda s: s | {"epoch": 1}, small_spec(), "epoch 1"),
        (lambda s: s | {"plan": s["plan"] | {"fingerprint": "mix:other"}}, small_spec(), "fingerprint"),
    ],
)
def test_changed_or_malformed_states_are_refused_by_name(edit: Any, spec: MixSpec, match: str) -> None:
    """MX7: a changed or removed source is refused by name; malformed/newer states too."""
    with pytest.raises(StateError, match=match):
        resume_mixture(spec, PlanParams(world_size=2, batch_size=3), edit(saved_state()))


def test_worked_example_state() -> None:
    """The worked example of specs/mixture.md: counts, cursors and the saved state's shape."""
    spec = small_spec()
    assert spec.counts(0).tolist() == [42, 18] and spec.cursors(1).tolist() == [42, 18]
    state = saved_state()
    assert [s["count"] for s in state["sources"]] == [42, 18]
    assert state["plan"]["offsets"] == [3, 3] and state["plan"]["fingerprint"].startswith("mix:")
    plan, later = resume_mixture(spec, PlanParams(world_size=3, batch_size=2), state)
    assert plan.level == 1 and plan.num_source_samples == 60 - 6 and plan.steps_per_rank == 9
    assert later.cursors(1).tolist() == [42, 18]
