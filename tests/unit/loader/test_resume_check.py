"""The resume check (specs/resume-state.md R18-R23): a loader state says what each consumer's
next batch holds; after ``load_state_dict`` the first batch of every consumer is checked — never
a false alarm on a legitimate resume (same topology, elastic, weights, mixtures, token blocks,
seq_len), and a wrong state is caught at the first batch naming the consumer and the ids."""

from __future__ import annotations

import functools
import json
import logging
import tempfile
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import ResumeMismatchError, StateError
from tests.helpers.datasets import write_dataset
from tests.helpers.resume import chain_settings
from tests.helpers.resume_check import Ranks
from tests.helpers.token_data import write_token_dataset, write_token_mixture

LAYOUTS = [(5, 0, 7, 3, 8), (4, 4, 4, 4, 4, 4), (13,), (1, 2, 3, 4, 5, 6, 7)]


@functools.cache
def dataset(layout: tuple[int, ...]) -> str:
    return write_dataset(tempfile.mkdtemp(prefix="resume_check_"), layout)


@functools.cache
def token_dataset() -> str:
    return write_token_dataset(tempfile.mkdtemp(prefix="resume_check_tokens_"), [7, 3, 12, 1, 9, 5, 14, 2, 6, 8] * 2)


def maker(path: Any, batch: int, workers: int = 0, **kw: Any) -> Any:
    def make(rank: int, world: int) -> sk.ShardLoader:
        options = {"shuffle_window": 4, "seed": 3, **kw}
        ds = sk.StreamingDataset(path, batch_size=batch, data_parallel=(rank, world), **options)
        return sk.ShardLoader(ds, num_workers=workers)
    return make


def resume_chain(make: Any, segments: list[tuple[int, int, int | None]], batch_kw: Any = None) -> dict[str, Any]:
    """Run ``segments`` of ``(world, batch, steps)`` one after another, each resumed from the
    state the one before saved; any false alarm raises (``resume_check="raise"``, the default)."""
    state = None
    for world, batch, steps in segments:
        ranks = Ranks(functools.partial(make, batch), world, state)
        ranks.run(steps)
        state = ranks.state()
    assert state is not None
    return state


# ---- no false alarm --------------------------------------------------------------------------------
@chain_settings(60)
@given(layout=st.sampled_from(LAYOUTS), shuffle=st.booleans(), tail=st.sampled_from(["drop", "pad"]),
       segments=st.lists(st.tuples(st.sampled_from([1, 1, 2, 3]), st.sampled_from([2, 2, 3, 1, 4]),
                                   st.integers(0, 5) | st.none()), min_size=2, max_size=5))
def test_no_false_alarm_over_resume_chains(layout: tuple[int, ...], shuffle: bool, tail: str,
                                           segments: list[tuple[int, int, int | None]]) -> None:
    """R19, R20, R22: chains of kills and resumes on any world size and batch size (elastic or
    not, at any kill point, epoch ends included) never fail the check; every state has a digest."""
    path = dataset(layout)
    if sum(layout) < max(w * b for w, b, _ in segments):
        segments = [(1, 1, s) for _, _, s in segments]

    def make(batch: int, rank: int, world: int) -> sk.ShardLoader:
        return maker(path, batch, shuffle=shuffle, tail=tail)(rank, world)

    state = resume_chain(make, segments)
    assert state["version"] == 2 and state["next"]["unit"] == "samples"


@pytest.mark.parametrize("kw", [{}, {"sample_weights": [((i * 7) % 5) / 2 for i in range(23)], "samples_per_epoch": 30},
                                {"interleave": 2}, {"spread": 3}], ids=["plain", "weights", "interleave", "spread"])
def test_no_false_alarm_for_weighted_interleaved_and_spread_plans(kw: dict[str, Any]) -> None:
    """R19-R20 over the sample plans of specs/partition.md (P13, P18) and sample weights (SW)."""
    path = dataset((5, 0, 7, 3, 8))

    def make(batch: int, rank: int, world: int) -> sk.ShardLoader:
        return maker(path, batch, **kw)(rank, world)

    resume_chain(make, [(2, 2, 2), (2, 2, 1), (1, 3, 2), (3, 1, 1), (1, 2, None)])


@pytest.mark.parametrize("apply_mix", ["next_epoch", "now"])
def test_no_false_alarm_for_mixtures_and_new_weights(tmp_path: Any, apply_mix: str) -> None:
    """R21: new mixture weights — kept for the loaded epoch ("next_epoch") or re-cutting its rest
    ("now", MX12: the state's promise no longer determines the rest, only the re-plan is checked)."""
    paths = [write_dataset(str(tmp_path / f"s{i}"), sizes) for i, sizes in enumerate([(6, 5), (4, 0, 7), (9,)])]

    def mix(weights: list[float]) -> sk.Mixture:
        return sk.Mixture([sk.Source(p, w, f"s{i}") for i, (p, w) in enumerate(zip(paths, weights, strict=True))],
                          samples_per_epoch=40)

    def make(weights: list[float], batch: int, rank: int, world: int) -> sk.ShardLoader:
        return maker(mix(weights), batch, apply_mix=apply_mix)(rank, world)

    state = None
    for weights, (world, batch, steps) in [([0.5, 0.3, 0.2], (1, 3, 2)), ([0.5, 0.3, 0.2], (2, 2, 1)),
                                           ([0.1, 0.1, 0.8], (1, 4, 1)), ([0.1, 0.1, 0.8], (2, 3, 0)),
                                           ([0.3, 0.3, 0.4], (1, 2, None))]:
        ranks = Ranks(functools.partial(make, weights, batch), world, state)
        ranks.run(steps)
        state = ranks.state()


@pytest.mark.parametrize("mode", ["concat", "pack"])
def test_no_false_alarm_for_token_blocks_and_seq_len_changes(mode: str) -> None:
    """R19-R20 for token blocks: heads are (document, offset) pairs; another seq_len cuts the rest
    into other blocks (TB8) and the check follows the re-plan."""
    path = token_dataset()

    def make(seq_len: int, batch: int, rank: int, world: int) -> sk.ShardLoader:
        return maker(path, batch, tokens=sk.TokenBlocks(seq_len, mode=mode))(rank, world)

    state = None
    for seq_len, (world, batch, steps) in [(8, (1, 2, 2)), (8, (1, 2, 1)), (8, (2, 1, 2)), (5, (1, 3, 1)),
                                           (6, (2, 2, 1)), (6, (1, 1, None))]:
        ranks = Ranks(functools.partial(make, seq_len, batch), world, state)
        ranks.run(steps)
        state = ranks.state()
        assert state["next"]["unit"] == "tokens"


def test_no_false_alarm_for_token_mixtures(tmp_path: Any) -> None:
    mixture, _ = write_token_mixture(str(tmp_path), [([5, 9, 3, 7, 11], 0.6), ([4, 8, 2], 0.4)], samples_per_epoch=12)

    def make(batch: int, rank: int, world: int) -> sk.ShardLoader:
        return maker(mixture, batch, tokens=sk.TokenBlocks(6))(rank, world)

    resume_chain(make, [(1, 2, 2), (2, 1, 1), (1, 3, None)])


def test_version_1_states_without_a_digest_load_and_resume() -> None:
    """R23: a state saved before the digest (version 1) loads; only the re-plan is checked."""
    path = dataset((5, 0, 7, 3, 8))
    saver = maker(path, 3)(0, 1)
    it = iter(saver)
    next(it)
    state = json.loads(json.dumps(saver.state_dict()))
    old = {k: v for k, v in state.items() if k != "next"} | {"version": 1}
    for batch in (3, 2):  # same topology and elastic
        loader = maker(path, batch)(0, 1)
        loader.load_state_dict(old)
        expected = len(loader)
        assert loader._boundary.check is not None and loader._boundary.check.promise is None
        assert len(list(loader)) == expected


# ---- caught at the first batch -------------------------------------------------------------------
def saved(path: str, world: int = 1, batch: int = 2, steps: int = 2, **kw: Any) -> dict[str, Any]:
    ranks = Ranks(maker(path, batch, **kw), world)
    ranks.run(steps)
    return ranks.state()


def first_batch_error(state: dict[str, Any], make: Any, world: int = 1) -> str:
    ranks = Ranks(make, world, state)
    with pytest.raises(ResumeMismatchError) as caught:
        ranks.step()
    return str(caught.value)


@pytest.mark.parametrize("world", [1, 2])
def test_offsets_shifted_by_one_batch_are_caught_on_the_same_topology(world: int) -> None:
    """R19: same topology — the consumer's first batch against the state's promise."""
    path = dataset((5, 0, 7, 3, 8))
    state = saved(path, world)
    state["plan"]["offsets"][0] += 2  # one batch of 2 further than the promise says
    message = first_batch_error(state, maker(path, 2), world)
    promised = state["next"]["consumers"][0]
    assert "consumer 0 (rank 0, worker 0)" in message and f"expected {promised}" in message
    assert "delivered samples [" in message


def test_offsets_shifted_are_caught_on_an_elastic_resume() -> None:
    """R20: elastic — the promise against the plan that saved the state, at the first batch."""
    path = dataset((5, 0, 7, 3, 8))
    state = saved(path, 2)
    state["plan"]["offsets"][1] += 2
    message = first_batch_error(state, maker(path, 3), 1)
    assert "saved consumer 1 (rank 1, worker 0) promised samples " + str(state["next"]["consumers"][1]) in message
    assert "consumer 0 (rank 0, worker 0) delivered samples [" in message


def test_another_seed_edited_into_the_state_is_caught() -> None:
    """R19: the state's plan says another seed than the one that made its digest."""
    path = dataset((4, 4, 4, 4, 4, 4))
    state = saved(path)
    state["plan"]["params"]["seed"] = 4
    message = first_batch_error(state, maker(path, 2, seed=4))
    assert "consumer 0 (rank 0, worker 0)" in message


def test_a_loader_of_another_seed_continues_the_saved_plan() -> None:
    """R19: a legitimate state loaded by a loader with another seed continues the saved plan (R3)."""
    path = dataset((4, 4, 4, 4, 4, 4))
    state = saved(path)
    Ranks(maker(path, 2, seed=9), 1, state).run(None)


def test_another_dataset_is_refused_by_the_fingerprint_before_any_check() -> None:
    """R8 catches a state of another dataset at load (the check never sees it)."""
    state = saved(dataset((5, 0, 7, 3, 8)))
    with pytest.raises(StateError, match="fingerprint") as caught:
        Ranks(maker(dataset((13,)), 2), 1, state)
    assert not isinstance(caught.value, ResumeMismatchError)


def test_a_state_dropped_by_set_epoch_is_caught_at_the_first_batch() -> None:
    """R21: ``set_epoch`` of another epoch before the loaded state was continued."""
    path = dataset((5, 0, 7, 3, 8))
    state = saved(path)
    loader = maker(path, 2)(0, 1)
    loader.load_state_dict(state)
    loader.set_epoch(1)
    with pytest.raises(ResumeMismatchError, match=r"consumer 0 \(rank 0, worker 0\) delivered samples") as caught:
        next(iter(loader))
    assert f"expected {state['next']['consumers'][0]}" in str(caught.value)
    meant = maker(path, 2)(0, 1)  # a drop the caller means
    meant.load_state_dict(state)
    meant.set_epoch(1, drop_loaded=True)
    list(meant)


def test_set_epoch_after_the_loaded_state_was_continued_is_no_alarm() -> None:
    path = dataset((5, 0, 7, 3, 8))
    state = saved(path, 1, 2, 1)
    loader = maker(path, 2)(0, 1)
    loader.load_state_dict(state)
    next(iter(loader))
    loader.set_epoch(4)
    list(loader)


def test_expect_resume_without_a_loaded_state_is_caught() -> None:
    """R21: a trainer said it resumed but no state reached the loader."""
    path = dataset((5, 0, 7, 3, 8))
    loader = maker(path, 2)(0, 1)
    loader.expect_resume()
    with pytest.raises(ResumeMismatchError, match="expect_resume"):
        iter(loader)
    loaded = maker(path, 2)(0, 1)
    loaded.expect_resume()
    loaded.load_state_dict(saved(path))
    list(loaded)


def test_warn_and_off(caplog: pytest.LogCaptureFixture) -> None:
    """R22: ``resume_check="warn"`` logs the mismatch and goes on; ``"off"`` checks nothing."""
    path = dataset((5, 0, 7, 3, 8))
    state = saved(path)
    state["plan"]["offsets"][0] += 2
    for mode in ("warn", "off"):
        caplog.clear()
        loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=2, shuffle_window=4, seed=3), resume_check=mode)
        loader.load_state_dict(state)
        with caplog.at_level(logging.WARNING):
            list(loader)
        assert ("resume check (R19)" in caplog.text) == (mode == "warn")
    with pytest.raises(ValueError, match="resume_check"):
        sk.ShardLoader(sk.StreamingDataset(path, batch_size=2), resume_check="maybe")


@pytest.mark.parametrize("edit", [lambda n: n.pop("unit"), lambda n: n.update(version=2),
                                  lambda n: n.update(consumers=[[1]] * 5),
                                  lambda n: n["consumers"].__setitem__(0, [True]),
                                  lambda n: n["consumers"].__setitem__(0, list(range(9))),
                                  lambda n: n.update(unit="tokens")])
def test_a_malformed_digest_is_refused_at_load(edit: Any) -> None:
    """R14, R18: the digest's shape is checked at load (``StateError`` naming it)."""
    path = dataset((5, 0, 7, 3, 8))
    state = saved(path)
    edit(state["next"])
    with pytest.raises(StateError, match="'next"):
        maker(path, 2)(0, 1).load_state_dict(state)


def test_token_offsets_shifted_are_refused_by_the_token_part() -> None:
    """For token blocks, a shifted offset is refused at load by the token part's consumer states
    (TB13) before the check could see it."""
    path = token_dataset()
    state = saved(path, tokens=sk.TokenBlocks(8))
    state["plan"]["offsets"][0] += 2
    with pytest.raises(StateError):
        maker(path, 2, tokens=sk.TokenBlocks(8))(0, 1).load_state_dict(state)


def test_an_edited_token_promise_is_caught() -> None:
    path = token_dataset()
    state = saved(path, tokens=sk.TokenBlocks(8))
    state["next"]["consumers"][0][1] += 1
    message = first_batch_error(state, maker(path, 2, tokens=sk.TokenBlocks(8)))
    assert "consumer 0 (rank 0, worker 0) delivered tokens [" in message


def test_an_iteration_that_restarted_from_zero_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """R21: whatever path loses the loaded state (here the boundary hands the iteration no plan
    state, as an epoch restarted from its start), the expectation is the loaded state's."""
    path = dataset((5, 0, 7, 3, 8))
    state = saved(path)
    loader = maker(path, 2)(0, 1)
    loader.load_state_dict(state)
    monkeypatch.setattr(loader._boundary, "next_iteration", lambda: (0, None))
    with pytest.raises(ResumeMismatchError, match=r"consumer 0 \(rank 0, worker 0\) delivered samples"):
        next(iter(loader))


@pytest.mark.parametrize("steps", [0, 2])
def test_new_weights_now_on_the_same_topology_are_no_alarm(tmp_path: Any, steps: int) -> None:
    """R21: ``apply_mix="now"`` re-cuts the loaded epoch's rest (MX12), also when nothing was
    consumed yet: the state's promise is not used, the re-plan is."""
    paths = [write_dataset(str(tmp_path / f"s{i}"), sizes) for i, sizes in enumerate([(6, 5), (4, 0, 7), (9,)])]

    def make(weights: list[float]) -> Any:
        mix = sk.Mixture([sk.Source(p, w, f"s{i}") for i, (p, w) in enumerate(zip(paths, weights, strict=True))],
                         samples_per_epoch=40)
        return maker(mix, 2, apply_mix="now")

    first = Ranks(make([0.5, 0.3, 0.2]), 1)
    first.run(steps)
    state = first.state()
    Ranks(make([0.1, 0.1, 0.8]), 1, state).run(None)
