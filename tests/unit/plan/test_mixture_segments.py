"""Weights changing inside an epoch: specs/mixture.md MX11 (segments) as properties."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError
from shardkit.plan import Plan, PlanParams
from shardkit.plan.mixture.spec import KEPT_EPOCHS, MixSource, MixSpec, ScheduleStep
from shardkit.plan.mixture.state import mixture_plan, mixture_to_state, resume_mixture
from tests.helpers.mixture_strategies import dropped_ids, expected_multiset, mix_params, mix_specs, source_of
from tests.helpers.plan_strategies import all_samples, assert_equal_steps

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def step_major(plan: Plan) -> list[int]:
    """Real samples of the epoch in step-major slot order (step, rank, position in the batch)."""
    params, batch = plan.params, plan.params.batch_size
    slots = []
    for consumer, out in enumerate(all_samples(plan)):
        rank, worker = divmod(consumer, params.workers_per_rank)
        for position, (sample, padded) in enumerate(zip(out.ids.tolist(), out.padded.tolist(), strict=True)):
            step = position // batch * params.workers_per_rank + worker
            if not padded:
                slots.append(((step * params.world_size + rank) * batch + position % batch, sample))
    return [sample for _, sample in sorted(slots)]


@PROPERTY
@given(mix_specs(max_changes=3), mix_params())
def test_a_segmented_epoch_is_the_exact_multiset_delivered_exactly_once(spec: MixSpec, params: PlanParams) -> None:
    """MX11 with MX1/MX5: an epoch whose mix changes inside it is still one fixed multiset
    (every source's stream range cursor..cursor+count), delivered once; equal steps."""
    plan = mixture_plan(spec, params)
    assert plan.num_source_samples == spec.samples_per_epoch
    assert_equal_steps(plan, spec.samples_per_epoch)
    real = [int(i) for out in all_samples(plan) for i in out.ids[~out.padded]]
    assert collections.Counter(real + dropped_ids(plan)) == expected_multiset(spec, params)


@PROPERTY
@given(mix_specs(max_changes=3), mix_params())
def test_every_segment_holds_its_exact_counts_in_step_order(spec: MixSpec, params: PlanParams) -> None:
    """MX11: in step-major order (step, rank, batch position), the real samples before each
    change point hold exactly the earlier segments' counts per source (largest remainder of
    each segment's length by its weights)."""
    plan = mixture_plan(spec, params)
    ordered = step_major(plan)
    counts = np.zeros(len(spec.sources), dtype=np.int64)
    for segment in spec.segments(params.epoch):
        assert int(segment.counts.sum()) == segment.end - segment.first_sample
        counts += segment.counts
        if segment.end <= len(ordered):
            got = np.bincount(source_of(spec, ordered[:segment.end]), minlength=len(spec.sources))
            assert got.tolist() == counts.tolist()


@PROPERTY
@given(mix_specs(max_changes=0), mix_params(tail="drop"), st.data())
def test_a_change_at_a_step_reaches_every_rank_at_that_step(spec: MixSpec, params: PlanParams,
                                                            data: st.DataObject) -> None:
    """MX11: a change at sample step x ranks x batch: every rank's batches before that step
    come from the first segment only, all later ones from the second."""
    per_step = params.world_size * params.batch_size
    steps = spec.samples_per_epoch // per_step
    if steps < 2 or sum(s.num_samples > 0 for s in spec.sources) < 1:
        return
    step = data.draw(st.integers(1, steps - 1))
    weights = tuple(0.0 if s.num_samples == 0 else data.draw(st.sampled_from([0.0, 0.5, 2.0])) for s in spec.sources)
    if not any(weights):
        return
    changed = MixSpec(spec.sources, spec.samples_per_epoch, spec.composition,
                      (ScheduleStep(params.epoch, weights, step * per_step),))
    first = changed.segments(params.epoch)[0].counts
    plan = mixture_plan(changed, params)
    before: list[int] = []
    for consumer, out in enumerate(all_samples(plan)):
        worker = consumer % params.workers_per_rank
        size = params.batch_size
        batches = [out.ids[j * size:(j + 1) * size] for j in range(len(out.ids) // size)]
        before += [int(i) for j, ids in enumerate(batches) if j * params.workers_per_rank + worker < step for i in ids]
    assert np.bincount(source_of(changed, before), minlength=len(spec.sources)).tolist() == first.tolist()


def test_an_epoch_without_inner_changes_is_unchanged() -> None:
    """MX11: segment 0 keeps the key and digest of an unsegmented epoch; a change in another
    epoch leaves this one's plan and state (version 1) as they were."""
    web, code = MixSource("web", np.array([50, 50]), 0.7, "fp-w"), MixSource("code", np.array([30]), 0.3, "fp-c")
    plain = MixSpec((web, code), 120)
    later = MixSpec((web, code), 120, schedule=(ScheduleStep(1, (0.2, 0.8), 60),))
    params = PlanParams(seed=5, world_size=2, batch_size=4, shuffle_window=16)
    assert [o.ids.tolist() for o in all_samples(mixture_plan(plain, params))] == \
        [o.ids.tolist() for o in all_samples(mixture_plan(later, params))]
    assert plain.digest(0) == later.digest(0) and later.digest(1) != plain.digest(1)
    plan = mixture_plan(later, params)
    assert mixture_to_state(later, plan, [0, 0])["version"] == 1
    assert later.counts(1).tolist() == [42 + 12, 18 + 48] and later.cursors(2).tolist() == [84 + 54, 36 + 66]


def test_a_segmented_state_resumes_with_its_segments_and_refuses_a_bad_one() -> None:
    """MX11/MX7: a state of a segmented epoch is version 2 and carries its segments; resuming
    it rebuilds the same plan; a malformed segments list is refused."""
    spec = MixSpec((MixSource("web", np.array([40]), 1.0, "a"), MixSource("code", np.array([9]), 1.0, "b")), 48,
                   schedule=(ScheduleStep(0, (0.0, 1.0), 24),))
    params = PlanParams(world_size=2, batch_size=4)
    plan = mixture_plan(spec, params)
    state = mixture_to_state(spec, plan, [4, 8])
    assert state["version"] == 2 and state["segments"] == [{"first_sample": 24, "weights": [0.0, 1.0]}]
    resumed, _ = resume_mixture(MixSpec(spec.sources, 48), params, state)  # the file's schedule is gone: saved wins
    assert [o.ids.tolist() for o in all_samples(resumed)] == [o.ids.tolist() for o in all_samples(plan)]
    with pytest.raises(Exception, match="segments"):
        resume_mixture(spec, params, state | {"segments": [{"first_sample": "x", "weights": []}]})


@pytest.mark.parametrize(
    ("step", "match"),
    [(ScheduleStep(0, (1.0,), 10), "below samples_per_epoch"), (ScheduleStep(0, (1.0,), -1), ">= 0")],
)
def test_bad_changes_are_refused(step: ScheduleStep, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        MixSpec((MixSource("a", np.array([5])),), 10, schedule=(step,))


@PROPERTY
@given(mix_specs(max_changes=3), st.lists(st.integers(0, 12), min_size=1, max_size=30))
def test_a_spec_keeps_a_few_epochs_segments_and_each_is_its_own(spec: MixSpec, epochs: list[int]) -> None:
    """MX11: asked for in any order, an epoch's segments are those a fresh spec computes, and a
    spec keeps those of at most KEPT_EPOCHS epochs (a long run does not keep every epoch's)."""
    for epoch in epochs:
        got = spec.segments(epoch)
        fresh = spec._segments_of(epoch)
        assert [(s.first_sample, s.end, s.weights) for s in got] == [(s.first_sample, s.end, s.weights) for s in fresh]
        assert all(np.array_equal(a.counts, b.counts) for a, b in zip(got, fresh, strict=True))
        assert len(spec._segments) <= KEPT_EPOCHS
