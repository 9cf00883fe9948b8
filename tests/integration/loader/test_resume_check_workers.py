"""The resume check with real DataLoader workers (specs/resume-state.md R19, R22, R25-R28): the head of a
consumer's first batch comes from the worker that cut it, inside its ``BatchMeta``."""

from __future__ import annotations

import json
from typing import Any

import pytest

import shardkit as sk
from shardkit.errors import ResumeMismatchError
from tests.helpers.datasets import write_dataset
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_dataset(str(tmp_path_factory.mktemp("resume_check") / "ds"), [5, 0, 7, 3, 8, 6])


def loader(path: str, workers: int, batch: int = 2, persistent: bool = False) -> sk.ShardLoader:
    dataset = sk.StreamingDataset(path, batch_size=batch, seed=5, shuffle_window=4, with_index=True)
    return sk.ShardLoader(dataset, num_workers=workers, persistent_workers=persistent, batches_per_transfer=2)


def ids(batches: Any) -> list[int]:
    return [i for batch in batches for i in batch["_index"].tolist()]


def saved_after(path: str, steps: int) -> tuple[dict[str, Any], list[int]]:
    """A state saved after ``steps`` batches with 2 workers, and what the run delivered after it."""
    first = loader(path, 2)
    batches = iter(first)
    got = [next(batches) for _ in range(steps)]
    state = json.loads(json.dumps(first.state_dict()))
    rest = ids(batches)
    del got
    return state, rest


@pytest.mark.parametrize("workers,batch,persistent", [(2, 2, False), (2, 2, True), (2, 3, False), (0, 2, False)])
def test_workers_resume_without_a_false_alarm(path: str, workers: int, batch: int, persistent: bool) -> None:
    """R19, R20: same topology with 2 workers (fresh and persistent), elastic to batch 3 and to
    the training process alone."""
    state, rest = saved_after(path, 3)
    resumed = loader(path, workers, batch, persistent)
    if persistent:
        list(resumed)  # workers started before the load
    resumed.load_state_dict(state)
    got = ids(resumed)
    if (workers, batch) == (2, 2):
        assert got == rest


def test_workers_catch_a_shifted_state_at_the_first_batch(path: str) -> None:
    """R19: the mismatch names the consumer (rank, worker, global id) and both id lists."""
    state, _ = saved_after(path, 3)
    state["plan"]["offsets"][1] += 2
    resumed = loader(path, 2)
    resumed.load_state_dict(state)
    with pytest.raises(ResumeMismatchError) as caught:
        list(resumed)
    message = str(caught.value)
    assert "consumer 1 (rank 0, worker 1)" in message
    assert f"expected {state['next']['consumers'][1]}" in message and "delivered samples [" in message


# ---- global order (R25-R28) ------------------------------------------------------------------------
def global_loader(path: str, workers: int, batch: int = 2, group: int = 2) -> sk.ShardLoader:
    dataset = sk.StreamingDataset(path, batch_size=batch, seed=5, shuffle_window=4, with_index=True, order="global")
    return sk.ShardLoader(dataset, num_workers=workers, batches_per_transfer=group)


@pytest.mark.parametrize("workers,batch,group", [(2, 2, 2), (2, 3, 1), (0, 4, 1)])
def test_global_order_workers_resume_without_a_false_alarm(path: str, workers: int, batch: int, group: int) -> None:
    """R26-R28: a global-order state saved with 2 workers × 2 batches per transfer resumes on the
    same topology (the rest bit for bit) and on others (another B_g: a re-cut) without an alarm;
    the heads compared are the workers' own (BatchMeta)."""
    first = global_loader(path, 2)
    batches = iter(first)
    for _ in range(3):
        next(batches)
    state = json.loads(json.dumps(first.state_dict()))
    rest = ids(batches)
    assert state["plan"]["position"] == 6 and len(state["next"]["global_batch"]) == 2
    resumed = global_loader(path, workers, batch, group)
    resumed.load_state_dict(state)
    got = ids(resumed)
    if (workers, batch, group) == (2, 2, 2):
        assert got == rest


def test_global_order_workers_catch_a_position_moved_by_a_global_batch(path: str) -> None:
    """R27: caught at the first batch a real worker delivers, naming the consumer and the ids."""
    first = global_loader(path, 2)
    batches = iter(first)
    for _ in range(3):
        next(batches)
    state = json.loads(json.dumps(first.state_dict()))
    del batches
    state["plan"]["position"] += 2
    resumed = global_loader(path, 2)
    resumed.load_state_dict(state)
    with pytest.raises(ResumeMismatchError) as caught:
        list(resumed)
    message = str(caught.value)
    assert "resume check (R27)" in message and f"promised samples {state['next']['global_batch']}" in message
    assert "consumer 0 (rank 0, worker 0) delivered samples [" in message
