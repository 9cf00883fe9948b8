"""A new mix for the rest of a started epoch through ``ShardLoader`` (specs/mixture.md MX12):
``apply_mix="now"`` keeps what the loop received, re-plans the remainder with the new weights
(an added source included) on another topology, and a state saved from the re-planned rest
resumes it exactly; the accounting adds up across the chain."""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest

import shardkit as sk
from shardkit.plan.mixture.spec import largest_remainder
from tests.helpers.datasets import write_dataset
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)
SIZES = {"web": [30, 0, 25, 12], "code": [9, 4], "math": [3], "extra": [7, 8]}
OLD = {"web": 0.6, "code": 0.3, "math": 0.1}
NEW = {"extra": 0.5, "math": 0.2, "code": 0.3, "web": 0.0}  # added, reordered, web switched off


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mixture_remix")
    return {name: write_dataset(str(root / name), sizes) for name, sizes in SIZES.items()}


def loader(roots: dict[str, str], weights: dict[str, float], batch_size: int, workers: int,
           apply_mix: str = "now", composition: str = "stratified") -> sk.ShardLoader:
    mix = sk.Mixture([sk.Source(roots[n], w, n) for n, w in weights.items()], samples_per_epoch=150,
                     composition=composition)
    dataset = sk.StreamingDataset(mix, batch_size=batch_size, seed=7, tail="pad", shuffle_window=8,
                                with_source=True, apply_mix=apply_mix)
    return sk.ShardLoader(dataset, num_workers=workers)


def take(shard_loader: sk.ShardLoader, steps: int | None = None) -> list[tuple[str, int]]:
    names = shard_loader.streaming.source.spec.names
    got: list[tuple[str, int]] = []
    for step, batch in enumerate(shard_loader):
        real = ~batch["_padded"].numpy()
        got += [(names[s], int(i)) for s, i in zip(batch["_source"].numpy()[real].tolist(),
                                                   batch["id"].numpy()[real].tolist(), strict=True)]
        if steps is not None and step + 1 == steps:
            break
    return got


@pytest.mark.parametrize("composition", ["stratified", "random"])  # random: cut windows counted (MX16)
def test_new_weights_now_replan_the_rest_of_the_epoch(roots: dict[str, str], composition: str) -> None:
    first = loader(roots, OLD, 4, 0, composition=composition)
    consumed = take(first, 7)
    state = json.loads(json.dumps(first.state_dict()))
    second = loader(roots, NEW, 3, 2, composition=composition)
    second.load_state_dict(state)
    more = take(second, 5)
    saved = json.loads(json.dumps(second.state_dict()))
    assert saved["mixture"]["remix"]["base"]["plan"] == state["plan"] and saved["mixture"]["version"] == 2
    third = loader(roots, NEW, 2, 1, composition=composition)
    third.load_state_dict(saved)  # the same weights: the re-planned rest resumes exactly (elastic here)
    rest = take(third)
    remaining = 150 - len(consumed)
    names = [e["name"] for e in saved["mixture"]["sources"]]  # the saved sources, then the added one
    want = largest_remainder(remaining, [NEW.get(n, 0.0) for n in names]).tolist()
    got = collections.Counter(name for name, _ in more + rest)
    assert [got.get(n, 0) for n in names] == want  # tail="pad": all of the re-planned rest
    assert got.get("web", 0) == 0 and len(more + rest) == remaining
    final = {e["name"]: e["consumed"] for e in third.state_dict()["mixture"]["sources"]}
    every = collections.Counter(name for name, _ in consumed + more + rest)
    assert final == {n: every.get(n, 0) for n in names}
    for name, size in SIZES.items():  # within the epoch no sample of a source repeats beyond its passes
        taken = collections.Counter(i for n, i in consumed + more + rest if n == name)
        passes = -(-sum(taken.values()) // sum(size)) if taken else 0
        assert all(count <= passes for count in taken.values()), name


def test_the_default_keeps_the_started_epoch(roots: dict[str, str]) -> Any:
    first = loader(roots, OLD, 4, 0, apply_mix="next_epoch")
    take(first, 7)
    second = loader(roots, NEW, 3, 0, apply_mix="next_epoch")
    second.load_state_dict(first.state_dict())
    assert "remix" not in second.state_dict()["mixture"]
    assert {n for n, _ in take(second)} <= set(OLD)
