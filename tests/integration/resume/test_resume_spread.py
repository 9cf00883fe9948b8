"""Resume equivalence through the real loader with read-time spreading (specs/partition.md
P18): the same chains of kills and resumes as test_resume_equivalence (which runs the loader's
default spread), here with spread and interleave drawn, including spread 1 (the old plan)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.resume import TOO_MANY_WORKERS, check_chain, run_chain
from tests.integration.resume.test_resume_equivalence import chains

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_spread_resume_equivalence_at_random_kill_points(
    small_dataset: str, uneven_dataset: str, data: st.DataObject
) -> None:
    """R2-R5/P18: chained kills and resumes, W and batch size changing, spread 1-12."""
    spec, segments, num_epochs = data.draw(chains(small_dataset, uneven_dataset))
    spec = dataclasses.replace(
        spec,
        shuffle=True,
        spread=data.draw(st.sampled_from([1, 2, 3, 12])),
        interleave=data.draw(st.sampled_from([1, 1, 3])),
    )
    results = run_chain(spec, segments, num_epochs, "/nonexistent")
    check_chain(spec, results, num_epochs)
