"""G5 in docs/guarantees.md consumed boundary: ``state_dict()`` records what the training loop received, never what
DataLoader workers prefetched (saving the dispatch cursor instead would skip the prefetched
batches on resume).

Two workers with ``prefetch_factor=4`` keep up to 8 batches in flight, so after ``k`` steps the
workers have produced well past ``k``. The saved offsets must still be exactly ``k`` batches'
worth per consumer (R9), the resumed run must yield exactly the uninterrupted run's remaining
multiset (G6, R3), and each consumer must continue where it stopped, in plan order (R2);
with ``in_order=True`` the resumed batches come in the uninterrupted run's exact order (L4).
Loader-state invariants L1-L6 are in specs/resume-state.md §Loader state.
"""

from __future__ import annotations

import pytest

from tests.helpers.resume import (
    PIN_WITHOUT_ACCELERATOR,
    TOO_MANY_WORKERS,
    DataSpec,
    Segment,
    Shape,
    check_chain,
    check_same_order,
    run_chain,
)

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)


@pytest.mark.filterwarnings(PIN_WITHOUT_ACCELERATOR)
@pytest.mark.parametrize("pin_memory", [False, True])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize(("kill_after", "tail"), [(1, "pad"), (9, "drop"), (60, "pad")])
def test_state_is_what_the_loop_received(uneven_dataset: str, tmp_path: object, pin_memory: bool,
                                         in_order: bool, kill_after: int, tail: str) -> None:
    """G5/R2/R9: stop after ``kill_after`` of 125-126 steps; offsets == received; exact rest."""
    data = DataSpec(uneven_dataset, 1001, tail=tail, seed=11, shuffle_window=64)
    shape = Shape(num_workers=2, batch_size=8, prefetch_factor=4, pin_memory=pin_memory,
                  in_order=in_order)
    results = run_chain(data, [Segment(shape, stop_after=kill_after), Segment(shape)], 1,
                        str(tmp_path))
    check_chain(data, results, 1)  # offsets == start + received per consumer, exact rest
    if in_order:  # L4: and the very same global order as the uninterrupted run
        check_same_order(data, [Segment(shape, kill_after), Segment(shape)], 1, results,
                         str(tmp_path))
    saved = results[0].state["plan"]["offsets"]
    assert sum(saved) == kill_after * 8  # not a sample more than the loop took
    assert results[0].state["steps"] == kill_after
    steps = results[0].ranks[0][0].length  # 125 (drop) or 126 (pad)
    assert len(results[1].ranks[0][0].batches) == results[1].ranks[0][0].length == steps - kill_after


@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_state_before_the_first_batch_is_the_start(small_dataset: str, tmp_path: object,
                                                   num_workers: int) -> None:
    """G5: a state taken right after ``iter(loader)`` (workers already prefetching) has every
    offset at 0, and resuming it replays the whole epoch."""
    data = DataSpec(small_dataset, 23, tail="pad", shuffle_window=4)
    shape = Shape(num_workers=num_workers, batch_size=2, prefetch_factor=4 if num_workers else None)
    results = run_chain(data, [Segment(shape, stop_after=0), Segment(shape)], 1, str(tmp_path))
    check_chain(data, results, 1)
    assert set(results[0].state["plan"]["offsets"]) == {0}
    assert len(results[1].ranks[0][0].batches) == 12  # ceil(23 / 2)
