"""``state_dict()`` of a token-block loader takes each consumer's cutter state from what the
consumer reported with its batches (specs/token-blocks.md TB28): no replay and no search in the
training process, and the same state as computing it from the offsets."""

from __future__ import annotations

import json

import pytest

import shardkit as sk
from shardkit.plan.tokens.plan import TokenPlan
from tests.helpers.token_data import write_token_dataset

LENGTHS = [3, 17, 0, 9, 25, 4, 11, 6, 30, 2, 14, 7, 1, 40, 5, 8]


def _computed(loader: sk.ShardLoader, state: dict) -> dict:
    """The ``tokens`` part computed from the state's offsets (no reports)."""
    plan = loader.streaming.step_plan(0, 1, loader.num_workers)
    return loader.streaming.extra_state(plan, state["plan"]["offsets"])["tokens"]


@pytest.mark.parametrize("mode", ["concat", "pack"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_dict_takes_the_states_consumers_reported(tmp_path, monkeypatch, mode, num_workers):
    """TB28: once every consumer has delivered a batch, ``state_dict()`` computes no cutter state
    (``TokenPlan.consumer_state`` is never called in the training process), and its ``tokens``
    part equals the one computed from the offsets, which loads and resumes (TB13)."""
    path = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
    tokens = sk.TokenBlocks(8, mode=mode, eos_id=2)
    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=tokens, tail="pad"),
                            num_workers=num_workers, batches_per_transfer=1)
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    calls: list[int] = []
    original = TokenPlan.consumer_state
    monkeypatch.setattr(TokenPlan, "consumer_state", lambda self, c, k: calls.append(c) or original(self, c, k))
    state = json.loads(json.dumps(loader.state_dict()))
    assert calls == []
    assert state["tokens"] == _computed(loader, state)
    resumed = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=tokens, tail="pad"))
    resumed.load_state_dict(state)  # checks every consumer state against its offset (TB13)


def test_a_snapshot_behind_the_boundary_gets_its_own_states(tmp_path):
    """TB28: a state at an earlier snapshot (a device prefetcher's staged batch) holds the states
    at that snapshot's offsets, not the latest reports."""
    path = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
    tokens = sk.TokenBlocks(8, mode="pack", eos_id=2)
    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=tokens, tail="pad"))
    batches = iter(loader)
    next(batches)
    snapshot = loader.consumed_snapshot()
    next(batches)
    state = loader.state_dict(snapshot)
    assert state["plan"]["offsets"] == [1]
    assert state["tokens"] == _computed(loader, state)
    assert state["tokens"] != loader.state_dict()["tokens"]


@pytest.mark.parametrize("mode", ["concat", "pack"])
def test_a_state_saved_right_after_an_exact_resume_is_the_loaded_one(tmp_path, monkeypatch, mode):
    """TB28, TB13: a consumer that has delivered nothing since an exact resume is where the loaded
    state (checked when it was loaded) put it: saved again as it was, with no cutter state
    computed, both before the iteration and after its first batch (the other consumer)."""
    path = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
    tokens = sk.TokenBlocks(8, mode=mode, eos_id=2)
    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=tokens, tail="pad"), num_workers=2,
                            batches_per_transfer=1)
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    saved = json.loads(json.dumps(loader.state_dict()))
    resumed = sk.ShardLoader(sk.StreamingDataset(path, batch_size=1, tokens=tokens, tail="pad"), num_workers=2,
                             batches_per_transfer=1)
    resumed.load_state_dict(saved)
    calls: list[int] = []
    original = TokenPlan.consumer_state
    monkeypatch.setattr(TokenPlan, "consumer_state", lambda self, c, k: calls.append(c) or original(self, c, k))
    assert resumed.state_dict()["tokens"] == saved["tokens"]
    rest = iter(resumed)
    next(rest)
    state = json.loads(json.dumps(resumed.state_dict()))
    assert calls == []
    assert state["tokens"] == _computed(resumed, state)
