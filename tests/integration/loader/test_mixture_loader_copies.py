"""An unweighted mixture source smaller than its share through ``ShardLoader`` (specs/mixture.md
MX2): each repeat of a sample in an epoch has its own ``ctx.copy`` (0..m-1) and so its own
``ctx.rng()`` draw, across a kill and an elastic resume."""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest

import shardkit as sk
from tests.helpers.datasets import write_ids
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)
SIZES = {"big": 60, "tiny": 6}
PARAMS: dict[str, Any] = {"seed": 3, "tail": "pad", "shuffle_window": 16}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("mixture_copies")
    return {name: write_ids(str(folder / name), size, shard_size=300, block_size=100) for name, size in SIZES.items()}


def augment(sample: dict[str, Any], ctx: sk.SampleContext) -> dict[str, Any]:
    assert "copy" not in sample  # an in-place transform never meets a repeat it already changed
    sample["copy"] = ctx.copy
    sample["draw"] = ctx.rng().random()
    return sample


def make(roots: dict[str, str], batch_size: int) -> sk.StreamingDataset:
    mix = sk.Mixture([sk.Source(roots["big"], 2.0), sk.Source(roots["tiny"], 1.0)], samples_per_epoch=60)
    dataset = sk.StreamingDataset(mix, batch_size=batch_size, with_source=True, transform=augment, **PARAMS)
    assert dataset.mixture is not None
    return dataset


def take(shard_loader: sk.ShardLoader, steps: int | None = None) -> list[tuple[str, int, int, float]]:
    names = shard_loader.streaming.source.spec.names
    got = []
    for step, batch in enumerate(shard_loader):
        real = ~batch["_padded"].numpy()
        rows = zip(batch["_source"].numpy()[real].tolist(), batch["id"].numpy()[real].tolist(),
                   batch["copy"].numpy()[real].tolist(), batch["draw"].numpy()[real].tolist(), strict=True)
        got += [(names[s], i, c, d) for s, i, c, d in rows]
        if steps is not None and step + 1 == steps:
            break
    return got


def test_repeats_of_a_tiny_source_draw_differently_across_a_kill_and_an_elastic_resume(
        roots: dict[str, str]) -> None:
    """MX2/SW8: ``tiny`` (6 samples) gets 20 of 60 per epoch (epoch 1 starts 2 into a pass),
    so each sample 3 or 4 times: killed after 3 steps on 2 workers x batch 4, resumed on 1
    worker x batch 3, each tiny sample taken ``m`` times comes with copies exactly 0..m-1 and
    ``m`` distinct draws; ``big`` (60 samples, 40 taken) keeps copy 0."""
    first = sk.ShardLoader(make(roots, 4), num_workers=2)
    first.set_epoch(1)
    got = take(first, 3)
    second = sk.ShardLoader(make(roots, 3), num_workers=1)
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    got += take(second)
    assert len(got) == 60 and len({(name, i, c) for name, i, c, _ in got}) == 60
    copies, draws = collections.defaultdict(list), collections.defaultdict(set)
    for name, i, c, d in got:
        copies[name, i].append(c)
        draws[name, i].add(d)
    assert sorted(len(copies["tiny", i]) for i in range(6)) == [3, 3, 3, 3, 4, 4]
    assert all(sorted(copies["tiny", i]) == list(range(len(copies["tiny", i]))) for i in range(6))
    assert all(len(draws["tiny", i]) == len(copies["tiny", i]) for i in range(6))
    assert {c for name, _, c, _ in got if name == "big"} == {0}
