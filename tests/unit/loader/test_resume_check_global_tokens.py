"""The global token promise (specs/resume-state.md R29, with R25-R28; specs/token-blocks.md TB33):
a token state in global order promises the head of its next global batch of blocks, checked at
the first batch after a load against the saving plan rebuilt at its position. Simulated ranks
(``data_parallel``), no workers; the chains of tests/unit/loader/test_global_token_loader.py run
with the check on too."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import PlanError, ResumeMismatchError, StateError
from shardkit.loader.resume_check import HEAD, plan_head
from tests.unit.loader.test_global_token_loader import CHAIN, CORPORA, lockstep, make_loaders, roots

__all__ = ["roots"]  # the module fixture, shared


def planned_heads(loader: sk.ShardLoader, state: dict[str, Any]) -> list[int]:
    """The first batch's block heads of ``state`` re-planned on the one rank of ``loader`` (whose
    batch is the global batch): its consumer's blocks cut as its worker cuts them (R26)."""
    plan = loader.streaming.step_plan(state["epoch"], 1, 0, state["plan"])
    return list(plan_head(plan, 0, plan.start_offsets[0]) or ())[: 2 * HEAD]


@CHAIN
@given(st.integers(0, len(CORPORA) - 1), st.integers(1, 7), st.integers(1, 7), st.sampled_from([2, 4, 6]),
       st.sampled_from([1, 2, 3, 4]), st.sampled_from(["drop", "pad"]), st.floats(0, 1), st.floats(0, 1))
def test_the_promise_is_the_next_global_batch_and_no_resume_chain_raises(
        roots: list[str], corpus: int, len_a: int, len_b: int, batch_a: int, batch_b: int, tail: str,
        kill_a: float, kill_b: float) -> None:
    """R29, R28: the state's ``next.global_batch`` is the (document, offset) head of the global
    batch at its position (the re-plan's consumers' heads in rank order, R26), ``[]`` when none
    begins there; a chain of resumes — the same topology, 1, 2 ranks, another B_g, another
    seq_len (a re-cut) — never raises, and each state of the chain keeps its own promise."""
    path = roots[corpus]
    tok_a, tok_b = sk.TokenBlocks(len_a, eos_id=2), sk.TokenBlocks(len_b, eos_id=2)
    first = make_loaders(path, tok_a, batch_a, 1, tail)
    first[0].set_epoch(0)
    try:
        lockstep(first, int(kill_a * len(first[0])))
    except PlanError:  # no global batch at these sizes (TB24's rule)
        return
    state = first[0].state_dict()
    assert state["next"]["unit"] == "tokens"
    if state["epoch"] == 0:
        assert state["next"]["global_batch"] == planned_heads(first[0], state)
    for world in (1, 2) if batch_a % 2 == 0 else (1,):  # the same B_g on other rank counts (R24)
        lockstep(make_loaders(path, tok_a, batch_a, world, tail, state), 1)
    second = make_loaders(path, tok_b, batch_b, 1, tail, state)  # another seq_len and B_g: a re-cut (TB33)
    lockstep(second, int(kill_b * len(second[0])))
    again = second[0].state_dict()
    assert again["next"]["global_batch"] == planned_heads(second[0], again) or again["epoch"] != 0
    lockstep(make_loaders(path, tok_b, batch_b, 1, tail, again))


def saved(roots: list[str], steps: int = 2) -> tuple[sk.TokenBlocks, dict[str, Any]]:
    tokens = sk.TokenBlocks(3, eos_id=2)
    first = make_loaders(roots[0], tokens, 4, 1)
    lockstep(first, steps)
    return tokens, first[0].state_dict()


def edited(state: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(state)
    part = out
    for key in path[:-1]:
        part = part[key]
    part[path[-1]] = value
    return out


@pytest.mark.parametrize("change", ["position+", "position-", "seed", "shuffle_window", "seq_len"])
def test_a_wrong_token_state_is_caught_at_its_first_batch(roots: list[str], change: str) -> None:
    """R29 (R27 for tokens): a state whose position moved by one global batch, whose sequence
    has another seed or shuffle window, or whose seq_len was edited, promises a head its own
    stream does not hold there: the first batch after the load raises, naming the position,
    B_g, both heads and the consumer."""
    tokens, state = saved(roots)
    position, per = state["plan"]["position"], 4 * 3
    wrong = {"position+": ("plan", "position", position + per), "position-": ("plan", "position", position - per),
             "seed": ("plan", "sequence", "seed", 99), "shuffle_window": ("plan", "sequence", "shuffle_window", 1),
             "seq_len": ("tokens", "seq_len", 5)}
    *where, value = wrong[change]
    bad = edited(state, tuple(where), value)
    loader = make_loaders(roots[0], tokens, 4, 1, state=bad)[0]
    size = f"position {bad['plan']['position']}, 4 blocks of {bad['tokens']['seq_len']}"
    with pytest.raises(ResumeMismatchError, match=rf"R27.*{size}\) promised tokens \[.*"
                                                 r"consumer 0 \(rank 0, worker 0\) delivered"):
        next(iter(loader))


def test_a_wrong_token_state_warns_under_warn(roots: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """R29 with ``resume_check="warn"``: the same mismatch is a warning, and the batches follow."""
    tokens, state = saved(roots)
    bad = edited(state, ("plan", "position"), state["plan"]["position"] + 12)
    dataset = sk.StreamingDataset(roots[0], batch_size=4, tokens=tokens, order="global", seed=5, shuffle_window=4,
                                  with_index=True)
    loader = sk.ShardLoader(dataset, resume_check="warn")
    loader.load_state_dict(bad)
    with caplog.at_level("WARNING", logger="shardkit"):
        assert next(iter(loader)) is not None
    assert any("R27" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("value", "match"), [
    ({"version": 1, "unit": "tokens"}, "keys"),
    ({"version": 1, "unit": "tokens", "global_batch": [1, 2], "extra": 1}, "keys"),
    ({"version": 2, "unit": "tokens", "global_batch": []}, "next.version"),
    ({"version": 1, "unit": "samples", "global_batch": []}, "next.unit"),
    ({"version": 1, "unit": "tokens", "global_batch": [1, 2, 3]}, "next.global_batch"),
    ({"version": 1, "unit": "tokens", "global_batch": [0, 1] * 5}, "next.global_batch"),
    ({"version": 1, "unit": "tokens", "global_batch": [-2, 0]}, "next.global_batch"),
    ({"version": 1, "unit": "tokens", "global_batch": [2**63, 0]}, "next.global_batch"),
    ({"version": 1, "unit": "tokens", "global_batch": [True, 0]}, "next.global_batch"),
    ({"version": 1, "unit": "tokens", "global_batch": "0,1"}, "next.global_batch"),
])
def test_a_malformed_token_promise_is_a_state_error_naming_next(roots: list[str], value: Any, match: str) -> None:
    """R29: the shape of a token global promise — exact keys, version 1, unit "tokens", at most
    HEAD (document, offset) pairs of ints in -1..2**63-1 — or a StateError naming ``next``."""
    tokens, state = saved(roots)
    with pytest.raises(StateError, match=match):
        make_loaders(roots[0], tokens, 4, 1, state={**state, "next": value})


def test_a_token_state_saved_before_the_promise_loads_and_is_checked_by_r26(roots: list[str]) -> None:
    """R29, R23: a token global state without ``next`` resumes as before; R26 still catches a
    run from the epoch's start."""
    tokens, state = saved(roots)
    old = {k: v for k, v in state.items() if k != "next"}
    reference = lockstep(make_loaders(roots[0], tokens, 4, 1, state=state))
    assert lockstep(make_loaders(roots[0], tokens, 4, 1, state=old))[0][0] == reference[0][0]
    bad = edited(old, ("plan", "position"), state["plan"]["position"] + 12)
    assert lockstep(make_loaders(roots[0], tokens, 4, 1, state=bad), 1)  # no promise: R26 alone agrees
