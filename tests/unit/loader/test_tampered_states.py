"""A tampered loader state is refused with ``StateError`` or loads: never another exception, an
allocation sized by the state, or an overflow (specs/resume-state.md R14, specs/token-blocks.md
TB22, specs/mixture.md MX7). Hypothesis edits a real saved state — token blocks in both modes
with an elastic level, a mixture, token blocks over a mixture — at every path: out-of-range,
wrongly typed and oversized values, deleted keys, extra keys; then loads it and takes a batch."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import shardkit as sk
from shardkit.errors import StateError
from tests.helpers.datasets import write_dataset
from tests.helpers.state_mutations import mutated, mutations
from tests.helpers.token_data import write_token_dataset, write_token_mixture

LENGTHS = [5, 0, 40, 7, 3, 12, 9, 27, 30, 2] * 3
Make = Callable[[int], sk.ShardLoader]


def saved(make: Make, batches: int = 2, then: int | None = None) -> dict[str, Any]:
    """The JSON state after ``batches`` batches (and, with ``then``, resumed with that batch size
    and one more batch: a state with an elastic level)."""
    loader = make(2)
    it = iter(loader)
    for _ in range(batches):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    if then is None:
        return state
    again = make(then)
    again.load_state_dict(state)
    next(iter(again))
    return json.loads(json.dumps(again.state_dict()))


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Make, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("tampered")
    path = write_token_dataset(str(root / "ds"), LENGTHS)

    def tokens(mode: str) -> Make:
        return lambda b: sk.ShardLoader(sk.StreamingDataset(path, batch_size=b, tail="pad",
                                                            tokens=sk.TokenBlocks(8, eos_id=2, mode=mode)))

    mix, _ = write_token_mixture(str(root / "m"), [(LENGTHS[:12], 0.5), (LENGTHS[12:], 0.5)], samples_per_epoch=20)
    a, b = write_dataset(str(root / "a"), [30, 0, 25]), write_dataset(str(root / "b"), [9, 4])
    samples = sk.Mixture([sk.Source(a, 0.6, "a"), sk.Source(b, 0.4, "b")], samples_per_epoch=60)

    def token_mix(b: int) -> sk.ShardLoader:
        return sk.ShardLoader(sk.StreamingDataset(mix, batch_size=b, tokens=sk.TokenBlocks(8, eos_id=2, mode="pack")))

    def sample_mix(b: int) -> sk.ShardLoader:
        return sk.ShardLoader(sk.StreamingDataset(samples, batch_size=b))

    return {"pack": (tokens("pack"), saved(tokens("pack"), then=4)),
            "concat": (tokens("concat"), saved(tokens("concat"), then=1)),
            "token-mixture": (token_mix, saved(token_mix)),
            "mixture": (sample_mix, saved(sample_mix, then=4))}


def _refused_or_loaded(make: Make, state: dict[str, Any]) -> None:
    loader = make(2)
    try:
        loader.load_state_dict(state)
        next(iter(loader), None)
    except StateError:
        pass


@pytest.mark.parametrize("kind", ["pack", "concat", "token-mixture", "mixture"])
def test_a_tampered_state_is_a_state_error_or_loads(cases, kind: str) -> None:
    """R14/TB22: whatever an edit makes of a saved state, only ``StateError`` comes out."""
    make, state = cases[kind]
    assert make(2).load_state_dict(json.loads(json.dumps(state))) is None  # the untouched state loads

    @settings(max_examples=80, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(tampered=mutations(state))
    def check(tampered: dict[str, Any]) -> None:
        _refused_or_loaded(make, tampered)

    check()


@pytest.mark.parametrize(("path", "value"), [
    (("plan", "params", "world_size"), 2**63), (("plan", "params", "world_size"), 2**40),
    (("plan", "params", "num_workers"), 10**20), (("plan", "params", "batch_size"), 2**64 + 1),
    (("tokens", "levels", 0, "seq_len"), 2**63), (("tokens", "levels", 0, "open_blocks"), 10**9),
    (("tokens", "levels", 0), None), (("tokens", "levels"), [[0, 0, 1]]),
    (("tokens", "levels", 0, "consumers", 0, "carry"), [[[0, 0, 10**20]]]),
])
def test_the_issues_token_state_edits_are_state_errors(cases, path: tuple[Any, ...], value: Any) -> None:
    """R14/TB22: world sizes and ints past int64 or the consumer cap, and malformed levels, are
    refused by name before anything is sized by them (``world_size = 2**63`` was a MemoryError)."""
    make, state = cases["pack"]
    with pytest.raises(StateError, match=str(path[-1]) if isinstance(path[-1], str) else "levels"):
        make(2).load_state_dict(mutated(state, path, "set", value))


@pytest.mark.parametrize(("path", "value"), [
    (("mixture", "sources", 0, "cursor"), 2**63), (("mixture", "samples_per_epoch"), 2**64 + 1),
    (("mixture", "sources", 1, "weight"), -(2**63) - 1),
])
def test_the_issues_mixture_state_edits_are_state_errors(cases, path: tuple[Any, ...], value: Any) -> None:
    """MX7/R14: a cursor or epoch size past int64 was an OverflowError."""
    make, state = cases["mixture"]
    with pytest.raises(StateError, match="2\\*\\*63|sources"):
        make(2).load_state_dict(mutated(state, path, "set", value))
