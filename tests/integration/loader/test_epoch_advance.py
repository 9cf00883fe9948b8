"""Epochs that advance by themselves, ``set_epoch`` that wins, abandoned iterations that continue
(R10 in specs/resume-state.md; L3, L6), with real DataLoader workers, persistent and not.

Dataset: 23 samples in shards [5, 0, 7, 3, 8] (tests/helpers/datasets.py), batch 3, tail pad,
so every epoch yields every sample exactly once (plus flagged pads).
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

import shardkit as sk
from tests.helpers.resume import TOO_MANY_WORKERS, Batch, real_ids, to_record

pytestmark = [pytest.mark.filterwarnings(TOO_MANY_WORKERS), pytest.mark.slow]
NUM_SAMPLES = 23
SHAPES = [(0, False), (2, False), (2, True)]  # (num_workers, persistent_workers)


def loader_for(path: str, num_workers: int, persistent: bool) -> sk.ShardLoader:
    dataset = sk.StreamingDataset(path, batch_size=3, seed=11, tail="pad", shuffle_window=4, with_index=True)
    return sk.ShardLoader(dataset, num_workers=num_workers, persistent_workers=persistent,
                          batches_per_transfer=2 if num_workers else 1)


def take(loader: sk.ShardLoader, limit: int | None = None) -> list[Batch]:
    """The batches of one ``iter(loader)``, breaking out after ``limit`` of them."""
    records = []
    for batch in loader:
        records.append(to_record(batch))
        if limit is not None and len(records) == limit:
            break
    return records


def check_once(records: list[Batch]) -> None:
    counts = collections.Counter(real_ids(records))
    assert set(counts) == set(range(NUM_SAMPLES)) and max(counts.values()) == 1, counts


@pytest.mark.parametrize(("num_workers", "persistent"), SHAPES)
def test_consecutive_iterations_read_consecutive_epochs(small_dataset: str, num_workers: int,
                                                        persistent: bool) -> None:
    """R10: without set_epoch, iteration k reads epoch k — exactly once each, a new order each
    time, and the very order an explicit ``set_epoch(k)`` gives (G4)."""
    loader = loader_for(small_dataset, num_workers, persistent)
    epochs = []
    for expected_epoch in range(3):
        assert len(loader) == 8  # ceil(23 / 3) steps, before the iteration as during it
        records = take(loader)
        assert loader.epoch == expected_epoch
        check_once(records)
        epochs.append(records)
    assert len({tuple(real_ids(records)) for records in epochs}) == 3, "every epoch needs a new order"
    pinned = loader_for(small_dataset, num_workers, False)
    for epoch, records in enumerate(epochs):
        pinned.set_epoch(epoch)
        assert take(pinned) == records


@pytest.mark.parametrize(("num_workers", "persistent"), SHAPES)
def test_set_epoch_pins_the_next_iteration(small_dataset: str, num_workers: int, persistent: bool) -> None:
    """R10: ``set_epoch(e)`` wins over the advance: the same epoch twice gives the same batches."""
    loader = loader_for(small_dataset, num_workers, persistent)
    loader.set_epoch(4)
    first = take(loader)
    loader.set_epoch(4)
    again = take(loader)
    assert loader.epoch == 4 and first == again
    after = take(loader)  # not pinned again: advances
    assert loader.epoch == 5 and real_ids(after) != real_ids(first)
    check_once(after)


@pytest.mark.parametrize(("num_workers", "persistent"), SHAPES)
def test_an_abandoned_iteration_continues_its_epoch(small_dataset: str, num_workers: int,
                                                    persistent: bool) -> None:
    """R10: breaking out after 3 batches, the next ``iter`` yields exactly the rest of the same
    epoch, in the uninterrupted order; the one after it reads the next epoch."""
    reference = take(loader_for(small_dataset, num_workers, persistent))
    loader = loader_for(small_dataset, num_workers, persistent)
    head = take(loader, limit=3)
    assert len(loader) == len(reference) - 3  # what the continuation will yield
    rest = take(loader)
    assert loader.epoch == 0
    assert head + rest == reference
    nxt = take(loader)
    assert loader.epoch == 1
    check_once(nxt)


@pytest.mark.parametrize(("num_workers", "persistent"), [(0, False), (2, True)])
def test_set_epoch_after_an_abandoned_iteration_restarts_that_epoch(small_dataset: str, num_workers: int,
                                                                    persistent: bool) -> None:
    """R10: a peeked batch (``next(iter(loader))``) followed by ``set_epoch(0)``: epoch 0 whole."""
    loader = loader_for(small_dataset, num_workers, persistent)
    iterator = iter(loader)
    next(iterator)
    del iterator
    loader.set_epoch(0)
    check_once(take(loader))


def test_a_held_iterator_counts_as_abandoned(small_dataset: str) -> None:
    """R10: ``iter(loader)`` while the previous iterator is still held (not closed) continues the
    epoch too; closing the old iterator later changes nothing."""
    loader = loader_for(small_dataset, 0, False)
    old = iter(loader)
    head = [to_record(next(old)) for _ in range(2)]
    rest = take(loader)
    old.close()
    check_once(head + rest)
    assert loader.epoch == 0
    take(loader)
    assert loader.epoch == 1


@pytest.mark.parametrize(("num_workers", "persistent"), [(0, False), (2, True)])
def test_a_restored_state_resumes_its_epoch_then_advances(small_dataset: str, num_workers: int,
                                                          persistent: bool) -> None:
    """R7/R10: a state saved mid-epoch 2 resumes epoch 2; after it the loader reads epoch 3."""
    saver = loader_for(small_dataset, num_workers, persistent)
    saver.set_epoch(2)
    state: dict[str, Any] = {}
    head = []
    for batch in saver:
        head.append(to_record(batch))
        if len(head) == 4:
            state = saver.state_dict()
            break
    loader = loader_for(small_dataset, num_workers, persistent)
    loader.load_state_dict(state)
    rest = take(loader)
    assert loader.epoch == 2
    check_once(head + rest)
    following = take(loader)
    assert loader.epoch == 3
    check_once(following)


@pytest.mark.parametrize(("num_workers", "persistent"), [(0, False), (2, True)])
def test_a_rewound_look_ahead_is_yielded_again(small_dataset: str, num_workers: int, persistent: bool) -> None:
    """R10 with a look-ahead (``DevicePrefetcher``'s staged batch): the loop used 2 batches, the
    loader handed over 3; after ``rewind`` the next iteration starts at the third."""
    reference = take(loader_for(small_dataset, num_workers, persistent))
    loader = loader_for(small_dataset, num_workers, persistent)
    iterator = iter(loader)
    used = [to_record(next(iterator)) for _ in range(2)]
    snapshot = loader.consumed_snapshot()
    next(iterator)  # the look-ahead
    loader.rewind(snapshot)
    del iterator
    assert used + take(loader) == reference


def test_set_epoch_on_the_dataset_wins_too(small_dataset: str) -> None:
    """R10: trainers that call ``dataset.set_epoch(e)`` (not the loader's) get epoch ``e``."""
    loader = loader_for(small_dataset, 0, False)
    take(loader)
    loader.streaming.set_epoch(7)
    seven = take(loader)
    assert loader.epoch == 7
    loader.set_epoch(7)
    assert take(loader) == seven


@pytest.mark.parametrize("then_set_epoch", [False, True])
def test_a_state_saved_at_an_epoch_end_resumes_with_the_next_epoch(small_dataset: str, then_set_epoch: bool,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """R10: a state with nothing left of its epoch counts as that epoch run to its end: the next
    iteration reads the following epoch in full (and ``set_epoch`` of it drops nothing worth a
    warning)."""
    saver = loader_for(small_dataset, 0, False)
    saver.set_epoch(2)
    take(saver)
    state = saver.state_dict()
    loader = loader_for(small_dataset, 0, False)
    loader.load_state_dict(state)
    assert len(loader) == 8
    if then_set_epoch:
        loader.set_epoch(3)
    records = take(loader)
    assert loader.epoch == 3
    check_once(records)
    assert "drops the loaded state" not in caplog.text
