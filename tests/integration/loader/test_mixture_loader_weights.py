"""Per-sample weights inside mixture sources through ``ShardLoader`` (specs/mixture.md MX17): a
weight field and an array give the plan's multiset of ``(source, sample, copy)`` with 2
workers, across a kill and elastic resumes (workers, batch size); each copy has its own
``ctx.copy`` and draw; other weights are refused by name."""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from shardkit.errors import StateError
from shardkit.plan import PlanParams
from shardkit.plan.mixture.spec import MixSpec
from tests.helpers.datasets import write_ids
from tests.helpers.mixture_strategies import source_of
from tests.helpers.mixture_weights_reference import expected_elements
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)
SIZES = {"web": 90, "code": 25}
PARAMS: dict[str, Any] = {"seed": 7, "tail": "pad", "shuffle_window": 8}
QUALITY = np.where(np.arange(90) % 10 == 0, 6.0, np.where(np.arange(90) % 7 == 0, 0.0, 1.0))


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two datasets of several shards; ``web`` has a ``quality`` field (heavy, zero and plain)."""
    folder = tmp_path_factory.mktemp("mixture_weights")
    def row(name: str) -> Callable[[int], dict[str, Any]]:
        return lambda i: {"id": i, "quality": float(QUALITY[i]) if name == "web" else 1.0}

    return {name: write_ids(str(folder / name), size, row(name), shard_size=600, block_size=200)
            for name, size in SIZES.items()}


def augment(sample: dict[str, Any], ctx: sk.SampleContext) -> dict[str, Any]:
    return {"id": sample["id"], "copy": ctx.copy, "draw": ctx.rng().random()}


def make(roots: dict[str, str], batch_size: int, weights: Any = "quality") -> sk.StreamingDataset:
    mix = sk.Mixture([sk.Source(roots["web"], 0.7, "web", sample_weights=weights), sk.Source(roots["code"], 0.3)],
                     samples_per_epoch=230, composition="stratified")
    dataset = sk.StreamingDataset(mix, batch_size=batch_size, with_source=True, transform=augment, **PARAMS)
    assert dataset.mixture is not None
    return dataset


Element = tuple[str, int, int]


def take(shard_loader: sk.ShardLoader, steps: int | None = None) -> list[tuple[Element, float]]:
    """((source, id, copy), draw) of every real sample received, up to ``steps`` batches."""
    names = shard_loader.streaming.source.spec.names
    got: list[tuple[Element, float]] = []
    for step, batch in enumerate(shard_loader):
        real = ~batch["_padded"].numpy()
        rows = zip(batch["_source"].numpy()[real].tolist(), batch["id"].numpy()[real].tolist(),
                   batch["copy"].numpy()[real].tolist(), batch["draw"].numpy()[real].tolist(), strict=True)
        got += [((names[s], i, c), d) for s, i, c, d in rows]
        if steps is not None and step + 1 == steps:
            break
    return got


def planned(spec: MixSpec, epoch: int) -> collections.Counter[Element]:
    """The plan layer's epoch multiset (the MX17 reference) as (source name, id, copy)."""
    expected = expected_elements(spec, PlanParams(epoch=epoch, **PARAMS))
    starts = np.cumsum([0] + [s.num_samples for s in spec.sources])
    owners = source_of(spec, [i for i, _ in expected])
    return collections.Counter({(spec.sources[s].name, i - int(starts[s]), c): n
                                for ((i, c), n), s in zip(expected.items(), owners, strict=True)})


def test_a_weighted_source_gives_the_planned_multiset_across_a_kill_and_elastic_resumes(
        roots: dict[str, str]) -> None:
    """MX17 with MX5/MX10: killed after 6 steps on 2 workers x batch 4, resumed on 1 worker x
    batch 3, killed again, resumed on 2 workers x batch 5: the elements received equal the plan's
    multiset; a zero-weight sample never comes, and every copy draws its own numbers (SW8)."""
    first = sk.ShardLoader(make(roots, 4), num_workers=2)
    first.set_epoch(1)
    got = take(first, 6)
    state = json.loads(json.dumps(first.state_dict()))
    entries = {e["name"]: e for e in state["mixture"]["sources"]}
    assert entries["web"]["sample_weights"].startswith("blake2b:") and "sample_weights" not in entries["code"]
    second = sk.ShardLoader(make(roots, 3), num_workers=1)
    second.load_state_dict(state)
    got += take(second, 5)
    third = sk.ShardLoader(make(roots, 5), num_workers=2)
    third.load_state_dict(json.loads(json.dumps(second.state_dict())))
    got += take(third)
    elements = collections.Counter(e for e, _ in got)
    assert elements == planned(first.streaming.source.spec, 1)
    assert sum(elements.values()) == 230
    web = [e for e in elements if e[0] == "web"]
    assert len(web) == sum(elements[e] for e in web)  # every web element distinct: (id, copy)
    assert not any(QUALITY[i] == 0 for _, i, _ in web)
    draws = collections.defaultdict(set)
    for (name, i, _), draw in got:
        if name == "web":
            draws[i].add(draw)
    heavy = [i for i in draws if QUALITY[i] == 6.0]
    assert heavy and all(len(draws[i]) == sum(1 for e in web if e[1] == i) for i in heavy)


def test_an_array_is_the_field_and_other_weights_are_refused_by_name(roots: dict[str, str]) -> None:
    """MX17/MX7: the same weights as an array plan the same epoch; a state planned with other
    weights is refused naming the source and both fingerprints."""
    from_field = sk.ShardLoader(make(roots, 4), num_workers=0)
    got = take(from_field, 3)
    state = from_field.state_dict()
    from_array = sk.ShardLoader(make(roots, 4, QUALITY * 2.0), num_workers=0)  # scaling changes nothing
    from_array.load_state_dict(state)
    rest = take(from_array)
    assert collections.Counter(e for e, _ in got + rest) == planned(from_field.streaming.source.spec, 0)
    changed = QUALITY.copy()
    changed[3] = 4.0
    with pytest.raises(StateError, match=r"'web'.*sample weights changed.*sample_weights of"):
        sk.ShardLoader(make(roots, 4, changed)).load_state_dict(state)
    with pytest.raises(StateError, match=r"'web'.*sample weights changed"):
        sk.ShardLoader(make(roots, 4, None)).load_state_dict(state)


def test_a_new_mix_now_takes_every_weighted_element_at_most_once(roots: dict[str, str]) -> None:
    """MX17 with MX12 (``apply_mix="now"``): the rest of a started epoch re-planned with new
    weights on another topology; every web element received is distinct, the epoch still holds 230,
    and the state's per-source ``consumed`` is what the loop received."""
    def remixed(web: float, apply: str, batch_size: int) -> sk.StreamingDataset:
        mix = sk.Mixture([sk.Source(roots["web"], web, "web", sample_weights="quality"),
                          sk.Source(roots["code"], 1.0 - web)], samples_per_epoch=230, composition="random")
        dataset = sk.StreamingDataset(mix, batch_size=batch_size, with_source=True, transform=augment,
                                      apply_mix=apply, **PARAMS)
        assert dataset.mixture is not None
        return dataset

    first = sk.ShardLoader(remixed(0.7, "next_epoch", 4), num_workers=2)
    got = take(first, 9)
    second = sk.ShardLoader(remixed(0.2, "now", 3), num_workers=1)
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    got += take(second)
    elements = collections.Counter(e for e, _ in got)
    assert sum(elements.values()) == 230 and all(n == 1 for e, n in elements.items() if e[0] == "web")
    assert not any(QUALITY[i] == 0 for name, i, _ in elements if name == "web")
    consumed = {e["name"]: e["consumed"] for e in second.state_dict()["mixture"]["sources"]}
    assert consumed == dict(collections.Counter(name for name, _, _ in elements.elements()))
