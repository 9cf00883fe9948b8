"""The resume check in global order (specs/resume-state.md R25-R28): the state promises the head
of the next global batch; after ``load_state_dict`` each consumer's first batch is checked against
the state re-planned on this topology (R26) and the promise against the state's sequence (R27) —
never a false alarm over chains of ranks × workers × ``batches_per_transfer`` × global batch sizes
(workers simulated in this process, tests/helpers/resume_check.py), and a wrong state is caught at
the first batch naming the consumer and the ids. Real DataLoader workers:
tests/integration/loader/test_resume_check_workers.py."""

from __future__ import annotations

import functools
import json
import logging
import tempfile
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import ResumeMismatchError, StateError
from shardkit.loader.resume_global import GlobalResumeCheck
from tests.helpers.datasets import write_dataset
from tests.helpers.resume import TOO_MANY_WORKERS, chain_settings
from tests.helpers.resume_check import Ranks, gathered_state, in_process_workers

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)
LAYOUTS = [(5, 0, 7, 3, 8, 11), (4,) * 8, (31,), (1, 2, 3, 4, 5, 6, 7, 8)]  # 34, 32, 31, 36 samples
KINDS = ("plain", "weights", "mixture")
MIXES = ([0.6, 0.4], [0.2, 0.8])  # a mixture's weights: new ones apply from the next epoch (MX12)
Segment = tuple[int, int, int, int, int | None]  # global batch, ranks, workers, batches per transfer, steps


@pytest.fixture(autouse=True)
def workers() -> Iterator[None]:
    with in_process_workers():
        yield


@functools.cache
def dataset(layout: tuple[int, ...]) -> str:
    return write_dataset(tempfile.mkdtemp(prefix="resume_check_global_"), layout)


def source(kind: str, layout: tuple[int, ...], mix: int = 0) -> tuple[Any, dict[str, Any]]:
    """What a dataset of ``kind`` reads, and its options (a mixture: random, or stratified per
    global batch, P29; the same data either way)."""
    if kind == "weights":
        return dataset(layout), {"sample_weights": [((i * 7) % 5) / 2 for i in range(sum(layout))],
                                 "samples_per_epoch": 30}
    if kind == "mixture":
        parts = [sk.Source(dataset(layout), MIXES[mix][0], "a"), sk.Source(dataset((6, 9, 2)), MIXES[mix][1], "b")]
        composition = "stratified" if layout[0] % 2 else "random"
        return sk.Mixture(parts, samples_per_epoch=40, composition=composition), {"apply_mix": "next_epoch"}
    return dataset(layout), {}


def maker(what: Any, batch: int, workers: int = 0, group: int = 1, **kw: Any) -> Any:
    def make(rank: int, world: int) -> sk.ShardLoader:
        options = {"shuffle_window": 4, "seed": 3, "order": "global", "with_index": True, **kw}
        ds = sk.StreamingDataset(what, batch_size=batch, data_parallel=(rank, world), **options)
        return sk.ShardLoader(ds, num_workers=workers, batches_per_transfer=group)
    return make


def divided(global_batch: int) -> st.SearchStrategy[int]:
    return st.sampled_from([r for r in (1, 2, 3, 4) if global_batch % r == 0])


SEGMENTS = st.sampled_from([2, 3, 4, 6, 8, 12]).flatmap(
    lambda g: st.tuples(st.just(g), divided(g), st.integers(0, 3), st.integers(1, 3), st.integers(0, 6) | st.none()))


# ---- no false alarm --------------------------------------------------------------------------------
@chain_settings(60)
@given(kind=st.sampled_from(KINDS), layout=st.sampled_from(LAYOUTS), shuffle=st.booleans(),
       tail=st.sampled_from(["drop", "pad"]), segments=st.lists(st.tuples(SEGMENTS, st.integers(0, 1)),
                                                                  min_size=2, max_size=4))
def test_no_false_alarm_over_global_resume_chains(kind: str, layout: tuple[int, ...], shuffle: bool, tail: str,
                                                  segments: list[tuple[Segment, int]]) -> None:
    """R25-R28: chains of kills and resumes in global order — any data sets and shard sizes, any
    ``B_g`` and ranks dividing it, 0-3 workers, 1-3 batches per transfer, any kill point (epoch
    ends included), sample weights, a mixture whose weights change (kept for the loaded epoch) —
    never fail the check, and each resume with a batch left is checked (R26 at each rank's first
    batch, R27 on every rank)."""
    state: dict[str, Any] | None = None
    for (global_batch, world, workers, group, steps), mix in segments:
        what, options = source(kind, layout, mix)
        make = maker(what, global_batch // world, workers, group, shuffle=shuffle, tail=tail, **options)
        ranks = Ranks(make, world, state)
        checks = [loader._boundary.check for loader in ranks.loaders]
        taken = ranks.run(steps)
        for check in checks:
            if check is not None and taken:
                assert isinstance(check, GlobalResumeCheck) and check.pending is not None and not check.broken
                assert len(check.pending) < max(workers, 1)  # worker 0's consumer delivered, and was checked
        state = ranks.state()
        assert state["plan"]["order"] == "global" and set(state["next"]) == {"version", "unit", "global_batch"}
        assert len(state["next"]["global_batch"]) <= 4


def test_the_check_plans_with_the_loaders_batches_per_transfer() -> None:
    """R26: with 2 workers and ``batches_per_transfer=2`` worker 1's first batch after a resume is
    global batch 2 of the re-plan (P30: units of 2), not 1 — the check's plan is the iteration's."""
    path = dataset(LAYOUTS[0])
    first = Ranks(maker(path, 3, 2, 2), 2)
    first.run(1)
    state = first.state()
    resumed = Ranks(maker(path, 3, 2, 2), 2, state)
    checks = [loader._boundary.check for loader in resumed.loaders]
    resumed.run(None)
    assert all(isinstance(c, GlobalResumeCheck) and c.pending == {} for c in checks)


@pytest.mark.parametrize("kind", KINDS)
def test_the_promise_is_the_same_on_every_topology(kind: str) -> None:
    """R25: after the same global batches, 1 rank, 2 ranks × 2 workers × 2 per transfer and 3 ranks
    × 3 workers save the same state and the same promise: the first sorted rows (P28) of the next
    global batch of the sequence."""
    what, options = source(kind, LAYOUTS[0])
    states = [saved(what, 6, world, workers, group, 3, **options) for world, workers, group in
              [(1, 0, 1), (2, 2, 2), (3, 3, 1)]]
    assert all(s["next"] == states[0]["next"] and s["plan"]["position"] == 18 for s in states)
    rest = Ranks(maker(what, 6, **options), 1, states[0])
    first = rest.step()
    assert first is not None and first[0]["_index"].tolist()[:4] == states[0]["next"]["global_batch"]


def test_a_global_state_gathers_no_head_slots() -> None:
    """R25: the promise is computed from the gathered position, so the gather row is the steps and
    this rank's offsets only (the default order adds a head per consumer, R18)."""
    ranks = Ranks(maker(dataset(LAYOUTS[1]), 2, 2, 1), 2)
    ranks.run(2)
    rows: list[list[int]] = []

    def gather(row: list[int], topology: Any, reads: bool, what: str) -> list[list[int]]:
        rows.append(list(row))
        return [list(row)] * 2

    with mock.patch("shardkit.loader.boundary.gather_by_dp_rank", gather):
        ranks.loaders[0].state_dict()
    assert [len(row) for row in rows] == [1 + 2]
    assert gathered_state(ranks.loaders)["next"]["global_batch"]


# ---- caught at the first batch -------------------------------------------------------------------
def saved(path: Any = "", global_batch: int = 6, world: int = 2, workers: int = 2, group: int = 2,
          steps: int = 2, **kw: Any) -> dict[str, Any]:
    ranks = Ranks(maker(path or dataset(LAYOUTS[0]), global_batch // world, workers, group, **kw), world)
    ranks.run(steps)
    return ranks.state()


def first_batch_error(state: dict[str, Any], make: Any, world: int) -> str:
    ranks = Ranks(make, world, state)
    with pytest.raises(ResumeMismatchError) as caught:
        ranks.step()
    return str(caught.value)


@pytest.mark.parametrize("delta", [6, -6])
@pytest.mark.parametrize("shape", [(2, 3, 2, 2), (1, 4, 0, 1), (3, 2, 3, 1)], ids=["same", "B_g=4", "3x3"])
def test_a_position_off_by_one_global_batch_is_caught(delta: int, shape: tuple[int, int, int, int]) -> None:
    """R27: the state's position moved by a global batch (either way) no longer holds the batch it
    promised; caught at the first batch on the same topology and on others (another ``B_g``)."""
    path = dataset(LAYOUTS[0])
    state = saved(path)
    state["plan"]["position"] += delta
    world, batch, workers, group = shape
    message = first_batch_error(state, maker(path, batch, workers, group), world)
    promised = state["next"]["global_batch"]
    assert "resume check (R27)" in message and f"position {state['plan']['position']}, 6 samples" in message
    assert f"promised samples {promised}" in message and "consumer 0 (rank 0, worker 0) delivered samples [" in message


def test_another_seed_edited_into_the_state_is_caught() -> None:
    """R27: the state's sequence says another seed than the one its promise was made with; a loader
    of that seed continues the state's sequence (P29), and the promise breaks."""
    path = dataset(LAYOUTS[1])
    state = saved(path)
    for key in ("params", "sequence"):
        state["plan"][key]["seed"] = 4
    message = first_batch_error(state, maker(path, 3, 2, 2, seed=4), 2)
    assert "resume check (R27)" in message and "consumer 0 (rank 0, worker 0) delivered samples [" in message


def test_a_loader_of_another_seed_continues_the_saved_sequence() -> None:
    """R28: no alarm — the state's sequence, not the loader's seed, decides the rest (P29, R24)."""
    state = saved(dataset(LAYOUTS[1]))
    Ranks(maker(dataset(LAYOUTS[1]), 2, 3, 1, seed=9), 3, state).run(None)


def test_a_state_dropped_by_set_epoch_is_caught_at_the_first_batch() -> None:
    """R26: ``set_epoch`` of another epoch before the loaded state was continued."""
    path = dataset(LAYOUTS[0])
    state = saved(path)
    loader = maker(path, 6, 2, 2)(0, 1)
    loader.load_state_dict(state)
    loader.set_epoch(1)
    with pytest.raises(ResumeMismatchError, match=r"resume check \(R19\): consumer 0 \(rank 0, worker 0\) "
                                                  r"delivered samples \[.*expected \["):
        next(iter(loader))
    meant = maker(path, 6, 2, 2)(0, 1)  # a drop the caller means
    meant.load_state_dict(state)
    meant.set_epoch(1, drop_loaded=True)
    list(meant)


def test_an_iteration_that_restarted_from_zero_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """R26: the iteration runs the epoch from its start instead of the loaded position."""
    path = dataset(LAYOUTS[0])
    state = saved(path)
    loader = maker(path, 6, 2, 2)(0, 1)
    loader.load_state_dict(state)
    monkeypatch.setattr(loader._boundary, "next_iteration", lambda: (0, None))
    with pytest.raises(ResumeMismatchError, match=r"consumer 0 \(rank 0, worker 0\) delivered samples"):
        next(iter(loader))


def test_a_broken_promise_is_reported_when_the_rank_delivers_nothing() -> None:
    """R27: a re-plan with no global batch left (a larger ``B_g``, tail drop) still reports a
    broken promise, at the iteration's end."""
    path = dataset((4,) * 8)  # 32 samples: 7 global batches of 4, 4 left after position 28
    state = saved(path, 4, 1, 0, 1, 7, shuffle=True)
    for key in ("params", "sequence"):
        state["plan"][key]["seed"] = 11
    loader = maker(path, 8, seed=11, shuffle=True)(0, 1)
    loader.load_state_dict(state)
    with pytest.raises(ResumeMismatchError, match=r"resume check \(R27\).*this rank delivered no batch"):
        list(loader)


def test_a_global_state_without_a_promise_loads_and_is_checked_by_the_re_plan() -> None:
    """R25, R23: a global state saved before R25 (no ``next``) resumes; R26 alone still applies."""
    path = dataset(LAYOUTS[0])
    state = saved(path)
    state.pop("next")
    Ranks(maker(path, 2, 0, 1), 3, state).run(None)
    loader = maker(path, 6, 2, 2)(0, 1)
    loader.load_state_dict(state)
    loader.set_epoch(1)
    with pytest.raises(ResumeMismatchError, match="consumer 0 "):
        next(iter(loader))


def test_warn_and_off(caplog: pytest.LogCaptureFixture) -> None:
    """R22 in global order: "warn" logs the broken promise and goes on, "off" checks nothing."""
    path = dataset(LAYOUTS[0])
    state = saved(path)
    state["plan"]["position"] += 6
    for mode in ("warn", "off"):
        caplog.clear()
        ds = sk.StreamingDataset(path, batch_size=6, order="global", seed=3, shuffle_window=4)
        loader = sk.ShardLoader(ds, resume_check=mode)
        loader.load_state_dict(state)
        with caplog.at_level(logging.WARNING):
            list(loader)
        assert ("resume check (R27)" in caplog.text) == (mode == "warn")


@pytest.mark.parametrize("edit", [lambda n: n.update(global_batch=[1, 2, 3, 4, 5]),
                                  lambda n: n.update(global_batch=[-1]),
                                  lambda n: n.update(global_batch=[True]),
                                  lambda n: n.update(global_batch=7),
                                  lambda n: n.update(unit="tokens"), lambda n: n.update(version=2),
                                  lambda n: n.update(consumers=[[1]] * 4),
                                  lambda n: (n.pop("global_batch"), n.update(consumers=[[1]] * 4))],
                         ids=["long", "negative", "bool", "int", "unit", "version", "extra", "per-consumer"])
def test_a_malformed_global_promise_is_refused_at_load(edit: Any) -> None:
    """R25, R14: a global state's ``next`` has its own shape (``StateError`` naming it)."""
    path = dataset(LAYOUTS[0])
    state = saved(path)
    edit(state["next"])
    with pytest.raises(StateError, match="'next"):
        maker(path, 6)(0, 1).load_state_dict(state)


def test_a_global_promise_in_a_default_order_state_is_refused() -> None:
    """R25: the shapes do not mix — a default-order state's ``next`` lists its consumers."""
    path = dataset(LAYOUTS[0])
    ranks = Ranks(maker(path, 2, order="shard"), 1)
    ranks.run(1)
    state = ranks.state()
    state["next"] = {"version": 1, "unit": "samples", "global_batch": [0, 1]}
    with pytest.raises(StateError, match="'next' must be an object with keys \\['consumers'"):
        maker(path, 2, order="shard")(0, 1).load_state_dict(json.loads(json.dumps(state)))
