"""The read-time knobs that mix more shards into a batch, interleaving (specs/partition.md
P13) and spreading (P18), keep the guarantees of the plain window shuffle: exactly once with
equal steps and pads last (P1-P4), deterministic seeks and same-topology resumes (P5, P9, R2),
elastic resumes onto another topology exactly once (R3-R5)."""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanParams
from tests.helpers import plan_strategies as ps

# Each knob gets about 60 examples (the knob is drawn).
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Per knob: how its cases are drawn, and its values on a topology an elastic resume moves to.
KNOBS = {"interleave": (ps.interleaved(), [1, 4]), "spread": (ps.spread_cases(), [1, 5])}


class KnobCase(NamedTuple):
    knob: str
    sizes: list[int]
    params: PlanParams


@st.composite
def knob_cases(draw: st.DrawFn) -> KnobCase:
    knob = draw(st.sampled_from(sorted(KNOBS)))
    return KnobCase(knob, *draw(KNOBS[knob][0]))


@PROPERTY
@given(knob_cases())
def test_exactly_once_equal_steps_pads_last(case: KnobCase) -> None:
    """P1-P4 with the knob: every real sample at most once, the rest is the reported drop."""
    ps.check_exactly_once_pads_last(case.sizes, case.params)


@PROPERTY
@given(knob_cases(), st.integers(0, 2**32 - 1))
def test_seek_and_same_topology_resume_are_exact(case: KnobCase, seed: int) -> None:
    """P5/P9/R2: deterministic; a seek or a resume yields exactly the rest of each sequence;
    the state records the knob."""
    state = ps.check_resume_exact(case.sizes, case.params, seed)
    assert state["params"][case.knob] == getattr(case.params, case.knob)


@settings(PROPERTY, max_examples=60)  # two plans and four levels an example: the slowest here
@given(knob_cases(), st.integers(0, 2**32 - 1), st.data())
def test_elastic_resume_is_exactly_once(case: KnobCase, seed: int, data: st.DataObject) -> None:
    """R3-R5: killed mid-epoch and resumed on another topology (with the knob or without),
    every sample is delivered once over both levels, except the new level's reported drop."""
    value = data.draw(st.sampled_from(KNOBS[case.knob][1]))
    other = data.draw(ps.plan_params(sum(case.sizes), epoch=case.params.epoch, **{case.knob: value}))
    ps.check_elastic_exactly_once(case.sizes, case.params, other, seed)
