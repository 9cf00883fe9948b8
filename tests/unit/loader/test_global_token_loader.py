"""``StreamingDataset(order="global", tokens=sk.TokenBlocks(...))`` through ``ShardLoader`` in one
process (specs/token-blocks.md TB30-TB34): ranks simulated with ``data_parallel=(rank, size)`` and
no workers, stepped in lockstep; a dataset, a weighted dataset and a mixture. Real gloo ranks and
DataLoader workers: tests/integration/loader/test_global_token_ranks.py."""

from __future__ import annotations

import collections
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import PlanError, ResumeMismatchError, StateError
from shardkit.loader import global_tokens
from tests.helpers.token_data import (
    check_against_reference,
    consumed_pairs,
    dropped_pairs,
    epoch_pairs,
    order_of,
    write_token_dataset,
    write_token_mixture,
)

CORPORA = ([5, 0, 13, 2, 40, 7, 1, 9, 22, 3] * 4, [1, 2, 3, 4, 60, 0, 0, 11] * 5, [17] * 30)
KEYS = ("input_ids", "labels", "position_ids", "cu_seqlens", "_index", "_token_offset")
Step = tuple[tuple[Any, ...], ...]
CHAIN = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("global_tokens")
    return [write_token_dataset(str(root / f"c{i}"), lengths, shard_size=7) for i, lengths in enumerate(CORPORA)]


def make_loaders(path: Any, tokens: sk.TokenBlocks, global_batch: int, world: int, tail: str = "drop",
                 state: dict[str, Any] | None = None, **options: Any) -> list[sk.ShardLoader]:
    out = []
    for rank in range(world):
        dataset = sk.StreamingDataset(path, batch_size=global_batch // world, tokens=tokens, order="global", seed=5,
                                      tail=tail, shuffle_window=4, with_index=True,
                                      data_parallel=(rank, world) if world > 1 else None, **options)
        loader = sk.ShardLoader(dataset)
        if state is not None:
            loader.load_state_dict(json.loads(json.dumps(state)))
        out.append(loader)
    return out


def row_values(batch: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(tuple(np.asarray(batch[key]).reshape(-1).tolist()) for key in KEYS)


def lockstep(ranks: list[sk.ShardLoader], steps: int | None = None) -> list[tuple[Step, list[dict[str, Any]]]]:
    """One iteration of every rank in lockstep: per step the ranks' values in rank order and
    their batches; every rank takes the same steps, len(loader) of them (TB31)."""
    lengths = {len(loader) for loader in ranks}
    assert len(lengths) == 1, f"len(loader) differs between ranks: {lengths}"
    its = [iter(loader) for loader in ranks]
    out = []
    while steps is None or len(out) < steps:
        parts = [next(it, None) for it in its]
        if all(p is None for p in parts):
            break
        assert all(p is not None for p in parts), f"step {len(out)}: some ranks ended, others did not"
        out.append((tuple(row_values(p) for p in parts if p is not None), [p for p in parts if p is not None]))
    if steps is None:
        assert len(out) == lengths.pop()
    return out


def rows_of(steps: list[tuple[Step, list[dict[str, Any]]]]) -> list[tuple[Any, ...]]:
    """The global batch's rows, each row's keys (cu_seqlens aside): what must not depend on R."""
    out = []
    for values, batches in steps:
        out.append(tuple(sum((v[k] for v in values), ()) for k in range(len(KEYS)) if KEYS[k] != "cu_seqlens"))
        assert all(int(b["cu_seqlens"][-1]) == b["input_ids"].numel() for b in batches)
    return out


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@CHAIN
@given(st.integers(0, len(CORPORA) - 1), st.integers(1, 9), st.sampled_from([None, 2]),
       st.sampled_from(["drop", "pad"]),
       st.sampled_from([2, 4, 6]).flatmap(lambda g: st.tuples(st.just(g), st.sampled_from(divisors(g)),
                                                              st.sampled_from(divisors(g)))),
       st.floats(0, 1))
def test_token_global_batches_are_the_same_on_any_rank_count_and_resume_bit_for_bit(
        roots: list[str], corpus: int, seq_len: int, eos: int | None, tail: str, shape: tuple[int, int, int],
        kill: float) -> None:
    """TB30-TB33: the global batches of R_a simulated ranks (input_ids, labels, position_ids,
    _index, _token_offset, row for row) equal one process's; each position of the epoch is
    an input once but the planned drop tail; labels are the reference's (TB4); a state saved
    after k steps (the stream position k·B_g·L) and loaded on R_b ranks trains the rest bit for
    bit, and the next epoch follows."""
    global_batch, ranks_a, ranks_b = shape
    tokens, path, lengths = sk.TokenBlocks(seq_len, eos_id=eos), roots[corpus], CORPORA[corpus]
    one = make_loaders(path, tokens, global_batch, 1, tail)
    one[0].set_epoch(0)
    reference = lockstep(one)
    assert rows_of(lockstep(make_loaders(path, tokens, global_batch, ranks_a, tail))) == rows_of(reference)
    order = order_of(one[0].streaming)
    seen = collections.Counter(pair for _, batches in reference for b in batches for pair in consumed_pairs(b))
    for _, batches in reference:
        for b in batches:
            check_against_reference(b, lengths, order, tokens)
    plan = one[0].streaming.step_plan(0, 1, 0)
    assert max(seen.values(), default=1) == 1 and seen + dropped_pairs(plan) == epoch_pairs(lengths, tokens)
    again = make_loaders(path, tokens, global_batch, 1, tail)
    again[0].set_epoch(0)
    done = lockstep(again, int(kill * (len(reference) - 1)))  # at the epoch end: the next epoch (R10)
    state = again[0].state_dict()
    assert state["plan"]["order"] == "global" and state["tokens"]["order"] == "global"
    assert state["plan"]["position"] == min(len(done) * global_batch * seq_len, plan.index.total)
    resumed = make_loaders(path, tokens, global_batch, ranks_b, tail, state)
    assert rows_of(done) + rows_of(lockstep(resumed)) == rows_of(reference)
    for loader in resumed + one:
        loader.set_epoch(1)
    assert rows_of(lockstep(resumed)) == rows_of(lockstep(one))


@CHAIN
@given(st.integers(0, len(CORPORA) - 1), st.integers(1, 9), st.integers(1, 9), st.integers(1, 4),
       st.integers(1, 4), st.floats(0, 0.99))  # inside the epoch: a state saved at its end starts the next (R10)
def test_another_seq_len_or_global_batch_recuts_the_rest_and_keeps_each_position_once(
        roots: list[str], corpus: int, len_a: int, len_b: int, batch_a: int, batch_b: int, kill: float) -> None:
    """TB33: a resume with another seq_len or B_g cuts the stream from the saved position; over
    the chain each position is an input once but the last plan's tail, and every input keeps its
    label (TB4, TB8)."""
    path, lengths = roots[corpus], CORPORA[corpus]
    tok_a, tok_b = sk.TokenBlocks(len_a, eos_id=2), sk.TokenBlocks(len_b, eos_id=2)
    first = make_loaders(path, tok_a, batch_a, 1)
    first[0].set_epoch(0)
    try:
        done = lockstep(first, int(kill * len(first[0])))
    except PlanError:  # no global batch at these sizes (TB24's rule)
        return
    state = first[0].state_dict()
    second = make_loaders(path, tok_b, batch_b, 1, state=state)
    rest = lockstep(second)
    order = order_of(second[0].streaming)
    seen = collections.Counter(pair for _, batches in done + rest for b in batches for pair in consumed_pairs(b))
    for _, batches in rest:
        for b in batches:
            check_against_reference(b, lengths, order, tok_b)
    plan = second[0].streaming.step_plan(0, 1, 0, state["plan"])
    assert max(seen.values(), default=1) == 1 and seen + dropped_pairs(plan) == epoch_pairs(lengths, tok_b)


@pytest.mark.parametrize("span", [1, 40, 200])
def test_a_consumer_cuts_its_batches_a_chunk_at_a_time_with_the_same_batches(
        roots: list[str], monkeypatch: pytest.MonkeyPatch, span: int) -> None:
    """TB34: a consumer holds the documents of a chunk of its units at a time; whatever the
    chunk's span, it yields the batches of one whole-epoch chunk."""
    tokens = sk.TokenBlocks(3, eos_id=2)
    reference = rows_of(lockstep(make_loaders(roots[1], tokens, 4, 2)))
    monkeypatch.setattr(global_tokens, "SPAN_POSITIONS", span)
    plan = make_loaders(roots[1], tokens, 4, 2)[0].streaming.step_plan(0, 2, 0)
    assert len(plan.chunks(0, span)) == (plan.num_batches(0) if span < 24 else -(-plan.num_batches(0) // (span // 12)))
    assert rows_of(lockstep(make_loaders(roots[1], tokens, 4, 2))) == reference


@pytest.mark.parametrize("kind", ["weighted", "mixture"])
def test_a_weighted_dataset_and_a_mixture_cut_one_stream_too(roots: list[str], tmp_path: Any, kind: str) -> None:
    """TB30 over SW11's weighted order and TB15's mixed order: 1, 2 and 4 ranks train the same
    global batches, and a state resumes on another rank count bit for bit."""
    tokens = sk.TokenBlocks(5, eos_id=2)
    path: Any
    options: dict[str, Any] = {}
    if kind == "mixture":
        path, _ = write_token_mixture(str(tmp_path), [(CORPORA[0], 0.6), (CORPORA[1], 0.4)], shard_size=9,
                                      samples_per_epoch=60)
    else:
        path = roots[0]
        options = {"sample_weights": np.resize([0.0, 1.0, 2.5], len(CORPORA[0])), "samples_per_epoch": 50}
    reference = rows_of(lockstep(make_loaders(path, tokens, 4, 1, **options)))
    assert reference
    for world in (2, 4):
        assert rows_of(lockstep(make_loaders(path, tokens, 4, world, **options))) == reference
    one = make_loaders(path, tokens, 4, 1, **options)
    done = rows_of(lockstep(one, 3))
    resumed = make_loaders(path, tokens, 4, 2, state=one[0].state_dict(), **options)
    assert done + rows_of(lockstep(resumed)) == reference


def test_token_global_states_are_checked_and_refused_by_name(roots: list[str]) -> None:
    """TB33, TB8, R17: another field/bos/eos, a malformed tokens part, a position past the stream,
    a default-order token state (and the reverse) are a StateError naming them; pack mode in
    global order is a ValueError (TB34)."""
    tokens = sk.TokenBlocks(4, eos_id=2)
    loader = make_loaders(roots[0], tokens, 2, 1)[0]
    state = loader.state_dict()
    with pytest.raises(StateError, match="token eos_id"):
        make_loaders(roots[0], sk.TokenBlocks(4, eos_id=3), 2, 1, state=state)
    with pytest.raises(StateError, match="state.tokens"):
        make_loaders(roots[0], tokens, 2, 1, state={**state, "tokens": {**state["tokens"], "seq_len": 0}})
    with pytest.raises(StateError, match="state.position"):
        far = make_loaders(roots[0], tokens, 2, 1, state={**state, "plan": {**state["plan"], "position": 10**6}})
        next(iter(far[0]))
    shard = sk.ShardLoader(sk.StreamingDataset(roots[0], batch_size=2, tokens=tokens))
    with pytest.raises(StateError, match="saved with order='global'"):
        shard.load_state_dict(state)
    with pytest.raises(StateError, match="saved with order='shard'"):
        loader.load_state_dict(shard.state_dict())
    with pytest.raises(ValueError, match="pack mode is not supported in global order"):
        sk.StreamingDataset(roots[0], batch_size=2, order="global", tokens=sk.TokenBlocks(4, mode="pack"))


def test_an_iteration_that_restarted_from_zero_is_caught_at_its_first_batch(roots: list[str],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """R26 for token blocks in global order: each consumer's first batch after a load is checked
    against the state re-planned here ((document, offset) heads, TB31's block ranges); a legitimate
    resume passes (the properties above run with the check on), a run from the epoch's start is
    caught."""
    tokens = sk.TokenBlocks(3, eos_id=2)
    first = make_loaders(roots[1], tokens, 4, 1)
    lockstep(first, 2)
    state = first[0].state_dict()
    loader = make_loaders(roots[1], tokens, 4, 1, state=state)[0]
    monkeypatch.setattr(loader._boundary, "next_iteration", lambda: (0, None))
    with pytest.raises(ResumeMismatchError, match=r"consumer 0 \(rank 0, worker 0\) delivered tokens"):
        next(iter(loader))
