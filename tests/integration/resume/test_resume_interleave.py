"""Resume equivalence through the real loader with read-time interleaving (specs/partition.md
P13): the same chains of kills and resumes as test_resume_equivalence, every segment reading
its consumers' ranges from several lanes at once."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.resume import TOO_MANY_WORKERS, chain_settings, check_chain, run_chain
from tests.integration.resume.test_resume_equivalence import chains

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)


@chain_settings(10)
@given(data=st.data())
def test_interleaved_resume_equivalence_at_random_kill_points(
    small_dataset: str, uneven_dataset: str, data: st.DataObject
) -> None:
    """R2-R5/P13: chained kills and resumes, W and batch size changing, 2-8 lanes."""
    spec, segments, num_epochs = data.draw(chains(small_dataset, uneven_dataset))
    spec = dataclasses.replace(spec, shuffle=True, interleave=data.draw(st.sampled_from([2, 3, 8])))
    results = run_chain(spec, segments, num_epochs, "/nonexistent")
    check_chain(spec, results, num_epochs)
