"""The pieces of ``shardkit.loader.lightning`` and ``shardkit.loader.hf`` that need no trainer loop:
the trained boundary behind a fetched-ahead batch, the epoch taken from the trainer, and clear
errors. The trainers themselves run in tests/integration/trainers/ (killed and resumed)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import ResumeMismatchError, StateError
from shardkit.loader.hf import STATE_FILE, load_checkpoint_state
from shardkit.loader.lightning import ShardkitCallback

N = 48
BATCH = 4


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("adapters") / "ds"
    with sk.ShardWriter(str(path), shard_size="1KiB", block_size="256B") as writer:
        for i in range(N):
            writer.write({"id": i, "x": np.arange(i % 3 + 1, dtype=np.int64)})
    return str(path)


def _callback(url: str, epoch: int = 0) -> ShardkitCallback:
    callback = ShardkitCallback(sk.ShardLoader(sk.StreamingDataset(url, batch_size=BATCH, seed=3)))
    callback.trainer = SimpleNamespace(current_epoch=epoch)
    return callback


def _ids(batches: Any) -> list[int]:
    return [i for b in batches for i in b["id"].tolist()]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trained=st.integers(0, N // BATCH), ahead=st.integers(0, 2))
def test_state_is_the_trained_boundary_whatever_was_fetched_ahead(url: str, trained: int, ahead: int) -> None:
    """The trainer fetched ``trained + ahead`` batches and trained ``trained``: resuming from the
    saved state yields exactly the batches after the trained ones."""
    full = _ids(_callback(url).train_dataloader())
    callback = _callback(url)
    batches = iter(callback.train_dataloader())
    fetched = [next(batches) for _ in range(min(trained + ahead, N // BATCH))]
    for _ in range(trained):
        callback.on_train_batch_start(None, None, None, 0)
    state = callback.train_dataloader().state_dict()
    json.dumps(state)  # it travels in checkpoints

    resumed = _callback(url)
    resumed.train_dataloader().load_state_dict(state)
    assert _ids(fetched[:trained]) + _ids(resumed.train_dataloader()) == full


def test_each_epoch_follows_the_trainer_and_len_is_the_whole_epoch(url: str) -> None:
    callback = _callback(url)
    tracked = callback.train_dataloader()
    first = _ids(tracked)
    callback.trainer.current_epoch = 1
    second = _ids(tracked)
    assert sorted(first) == sorted(second) == list(range(N)) and first != second
    assert len(tracked) == N // BATCH


def test_a_loaded_state_of_an_earlier_epoch_gives_way_to_the_trainers_epoch(url: str) -> None:
    callback = _callback(url)
    batches = iter(callback.train_dataloader())
    next(batches)
    callback.on_train_batch_start(None, None, None, 0)
    state = callback.train_dataloader().state_dict()
    later = _callback(url, epoch=1)
    later.train_dataloader().load_state_dict(state)
    assert _ids(later.train_dataloader()) == _ids(_callback(url, epoch=1).train_dataloader())


def test_a_restarting_fit_loop_without_a_restored_loader_state_is_caught(url: str) -> None:
    """R21: Lightning restores dataloader states before ``on_train_start`` when its fit loop is
    restarting; a restart that restored none (a checkpoint without the loader's state) fails at
    the first ``iter``, one that restored it does not, and a fresh fit expects nothing."""
    for restarting, load in [(True, False), (True, True), (False, False)]:
        saver = _callback(url)
        next(iter(saver.train_dataloader()))
        saver.on_train_batch_start(None, None, None, 0)
        state = saver.train_dataloader().state_dict()
        callback = _callback(url)
        callback.trainer.fit_loop = SimpleNamespace(restarting=restarting)
        if load:
            callback.train_dataloader().load_state_dict(state)
        callback.on_train_start(callback.trainer, None)
        if restarting and not load:
            with pytest.raises(ResumeMismatchError, match="expect_resume"):
                iter(callback.train_dataloader())
        else:
            _ids(callback.train_dataloader())


def test_iterating_without_the_callback_in_a_trainer_says_so(url: str) -> None:
    callback = ShardkitCallback(sk.ShardLoader(sk.StreamingDataset(url, batch_size=BATCH)))
    with pytest.raises(StateError, match="callbacks=\\[shardkit_cb\\]"):
        iter(callback.train_dataloader())
    with pytest.raises(TypeError, match="needs a ShardLoader"):
        ShardkitCallback(sk.StreamingDataset(url, batch_size=BATCH))  # type: ignore[arg-type]


def test_hf_checkpoint_without_or_with_a_bad_loader_state_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(StateError, match=f"checkpoint-7: no {STATE_FILE}"):
        load_checkpoint_state(str(tmp_path / "checkpoint-7"))
    folder = tmp_path / "checkpoint-8"
    folder.mkdir()
    (folder / STATE_FILE).write_text("[1, 2")
    with pytest.raises(StateError, match="checkpoint-8"):
        load_checkpoint_state(str(folder))
    (folder / STATE_FILE).write_text('{"kind": "shardkit.loader"}')
    assert load_checkpoint_state(str(folder)) == {"kind": "shardkit.loader"}


def test_next_epoch_and_epoch_batches_are_what_a_trainer_sizes_its_loop_by(url: str) -> None:
    """R10 seen from outside: the epoch the next iteration reads (a loaded state's, kept; the
    next one once an iteration or a loaded state reached the end) and a whole epoch's steps."""
    loader = sk.ShardLoader(sk.StreamingDataset(url, batch_size=BATCH, seed=3))
    assert loader.next_epoch == 0 and loader.epoch_batches(0) == len(loader) == N // BATCH
    list(loader)
    assert loader.next_epoch == 1
    batches = iter(loader)
    next(batches)
    mid = loader.state_dict()
    for _ in batches:
        pass
    end = loader.state_dict()
    resumed = sk.ShardLoader(sk.StreamingDataset(url, batch_size=BATCH, seed=3))
    resumed.load_state_dict(mid)
    assert resumed.next_epoch == 1 and len(resumed) == resumed.epoch_batches(1) - 1
    resumed.load_state_dict(end)
    assert resumed.next_epoch == 2 and len(resumed) == resumed.epoch_batches(2)
