"""``StreamingDataset(order="global")`` through ``ShardLoader`` in one process (specs/partition.md
P27-P35, specs/resume-state.md R16, R17, R24): ranks simulated with ``data_parallel=(rank, size)`` and
no workers, stepped in lockstep; a dataset, a weighted dataset and a mixture. Real gloo ranks
and DataLoader workers: tests/integration/loader/test_global_order_ranks.py."""

from __future__ import annotations

import collections
import itertools
import json
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import StateError
from shardkit.plan.global_order.order import GlobalOrderPlan
from shardkit.read.stream import upcoming_shards
from tests.helpers.datasets import write_dataset

SIZES = (23, 0, 17, 31, 9)  # 80 samples
KINDS = ("plain", "weighted", "mixture")
Batch = tuple[tuple[int, ...], tuple[bool, ...]]
Make = Callable[..., sk.StreamingDataset]
CHAIN = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("global_loader")
    return {"plain": write_dataset(str(root / "plain"), SIZES), "code": write_dataset(str(root / "code"), (11, 7))}


def maker(roots: dict[str, str], kind: str, seed: int = 3, tail: str = "drop") -> Make:
    """A factory of datasets of ``kind`` in global order, by batch size and data-parallel place."""
    def make(batch_size: int, rank: int = 0, size: int = 1, **options: Any) -> sk.StreamingDataset:
        common: dict[str, Any] = {"batch_size": batch_size, "order": "global", "seed": seed, "tail": tail,
                                  "shuffle_window": 8, "with_index": True,
                                  "data_parallel": (rank, size) if size > 1 else None, **options}
        if kind == "weighted":
            weights = np.resize([0.0, 0.5, 1.0, 2.5], sum(SIZES))
            return sk.StreamingDataset(roots["plain"], sample_weights=weights, samples_per_epoch=90, **common)
        if kind == "mixture":
            mix = sk.Mixture([sk.Source(roots["plain"], 0.7, "plain"), sk.Source(roots["code"], 0.3, "code")],
                             samples_per_epoch=70, composition="stratified")
            return sk.StreamingDataset(mix, **common)
        return sk.StreamingDataset(roots["plain"], **common)
    return make


def loaders(make: Make, global_batch: int, world: int, state: dict[str, Any] | None = None) -> list[sk.ShardLoader]:
    out = [sk.ShardLoader(make(global_batch // world, rank, world)) for rank in range(world)]
    for loader in out:
        if state is not None:
            loader.load_state_dict(json.loads(json.dumps(state)))
    return out


def record(batch: dict[str, Any]) -> Batch:
    ids = tuple(batch["_index"].tolist())
    pads = tuple(batch["_padded"].tolist()) if "_padded" in batch else (False,) * len(ids)
    return ids, pads


def lockstep(ranks: list[sk.ShardLoader], steps: int | None = None) -> list[Batch]:
    """One iteration of every rank, a step at a time, ``steps`` at most: the global batches
    (rank slices in rank order, P27); every rank stops at the same step (G3)."""
    lengths = {len(loader) for loader in ranks}
    assert len(lengths) == 1, f"len(loader) differs between ranks: {lengths}"
    its = [iter(loader) for loader in ranks]
    out: list[Batch] = []
    while steps is None or len(out) < steps:
        parts = [next(it, None) for it in its]
        if all(p is None for p in parts):
            break
        assert all(p is not None for p in parts), f"step {len(out)}: some ranks ended, others did not"
        slices = [record(p) for p in parts if p is not None]
        out.append((sum((s[0] for s in slices), ()), sum((s[1] for s in slices), ())))
    if steps is None:
        assert len(out) == lengths.pop()
    return out


def epochs(ranks: list[sk.ShardLoader], count: int) -> list[list[Batch]]:
    """``count`` epochs from where the loaders stand (R10: a loaded state's epoch first)."""
    first = ranks[0].next_epoch
    out = []
    for epoch in range(first, first + count):
        for loader in ranks:
            loader.set_epoch(epoch)
        out.append(lockstep(ranks))
    return out


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@CHAIN
@given(st.sampled_from(KINDS), st.integers(0, 2**16), st.sampled_from(["drop", "pad"]),
       st.sampled_from([4, 6, 12]).flatmap(lambda g: st.tuples(st.just(g), st.sampled_from(divisors(g)),
                                                              st.sampled_from(divisors(g)))),
       st.floats(0, 1), st.floats(0, 1))
def test_the_loader_state_resumes_global_batches_on_any_rank_count(
        roots: dict[str, str], kind: str, seed: int, tail: str, shape: tuple[int, int, int],
        kill: float, cut: float) -> None:
    """P27, P31, R16, R24: the global batches of ``R_a`` simulated ranks equal one process's; a
    state saved after ``k`` steps and loaded on ``R_b`` ranks trains the rest bit for bit (and
    len(loader) counts it); a rank abandoning its iteration continues it (R10, its own offsets,
    ``rank=``); each epoch's real samples are received once."""
    global_batch, ranks_a, ranks_b = shape
    make = maker(roots, kind, seed, tail)
    reference = epochs(loaders(make, global_batch, 1), 2)
    assert epochs(loaders(make, global_batch, ranks_a), 2) == reference
    steps = len(reference[0])
    one = loaders(make, global_batch, 1)
    one[0].set_epoch(0)
    done = lockstep(one, int(kill * (steps - 1)))  # a state at the epoch's end: the next test
    state = one[0].state_dict()
    assert state["plan"]["order"] == "global" and state["plan"]["position"] == len(done) * global_batch
    resumed = loaders(make, global_batch, ranks_b, state)
    assert {len(loader) for loader in resumed} == {steps - len(done)}
    part = lockstep(resumed, int(cut * (steps - len(done))))  # abandoned: each rank continues its own
    assert done + part + lockstep(resumed) == reference[0]
    assert epochs(resumed, 1) == reference[1:]
    if kind == "plain":
        dropped = one[0].streaming.plan(0, 1, 0).dropped_indices().tolist()
        real = collections.Counter(i for ids, pads in reference[0] for i, p in zip(ids, pads, strict=True) if not p)
        assert max(real.values()) == 1 and sorted([*real, *dropped]) == list(range(sum(SIZES)))


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_saved_at_the_end_of_an_epoch_continues_with_the_next(roots: dict[str, str], kind: str) -> None:
    """R10 in global order: a state whose position leaves no global batch resumes the next epoch
    from its start, on any rank count (R24)."""
    make = maker(roots, kind)
    one = loaders(make, 6, 1)
    reference = epochs(one, 2)
    again = loaders(make, 6, 1)
    again[0].set_epoch(0)
    lockstep(again)
    state = again[0].state_dict()
    resumed = loaders(make, 6, 3, state)
    assert resumed[0].next_epoch == 1
    assert epochs(resumed, 1) == reference[1:]


def test_a_state_of_one_order_is_refused_by_the_other_naming_both(roots: dict[str, str]) -> None:
    """R17: global into shard order and shard into global order, StateError naming both orders."""
    glob = sk.ShardLoader(maker(roots, "plain")(4))
    shard = sk.ShardLoader(sk.StreamingDataset(roots["plain"], batch_size=4, with_index=True))
    with pytest.raises(StateError, match="saved with order='global', but this dataset reads order='shard'"):
        shard.load_state_dict(glob.state_dict())
    with pytest.raises(StateError, match="saved with order='shard', but this dataset reads order='global'"):
        glob.load_state_dict(shard.state_dict())


def test_a_malformed_or_foreign_global_state_is_refused(roots: dict[str, str]) -> None:
    """R16: the global state's shape and fingerprint are checked at load (R8, R14)."""
    loader = sk.ShardLoader(maker(roots, "plain")(4))
    state = loader.state_dict()
    for change, message in (({"position": -1}, "state.position"), ({"fingerprint": "xxh64:0"}, "fingerprint"),
                            ({"offsets": [0]}, "expected keys")):
        bad = {**state, "plan": {**state["plan"], **change}}
        with pytest.raises(StateError, match=message):
            sk.ShardLoader(maker(roots, "plain")(4)).load_state_dict(bad)
    far = {**state, "plan": {**state["plan"], "position": sum(SIZES) + 1}}
    with pytest.raises(StateError, match="state.position"):
        fresh = sk.ShardLoader(maker(roots, "plain")(4))
        fresh.load_state_dict(far)
        next(iter(fresh))


def test_what_global_order_does_not_cover_yet_is_refused_by_name(roots: dict[str, str]) -> None:
    """P35, TB34: token blocks in pack mode, apply_mix='now' and out-of-order delivery in global
    order are a ValueError naming them."""
    with pytest.raises(ValueError, match="pack mode is not supported in global order"):
        sk.StreamingDataset(roots["plain"], batch_size=2, order="global",
                            tokens=sk.TokenBlocks(8, field="tokens", mode="pack"))
    mix = sk.Mixture([sk.Source(roots["plain"], 1.0, "plain")])
    with pytest.raises(ValueError, match="apply_mix='now'.*not supported in global order"):
        sk.StreamingDataset(mix, batch_size=2, order="global", apply_mix="now")
    with pytest.raises(ValueError, match="in_order=False.*global order needs in-order delivery"):
        sk.ShardLoader(maker(roots, "plain")(2), num_workers=2, in_order=False)


def test_the_step_plan_depends_on_the_group_in_global_order_only(roots: dict[str, str]) -> None:
    """P35: batches per transfer deal global order's batches (P30), so they key its plan cache."""
    glob = maker(roots, "plain")(2)
    assert isinstance(glob.step_plan(0, 1, 2, None, 3), GlobalOrderPlan)
    assert glob.step_plan(0, 1, 2, None, 3).group == 3 and glob.step_plan(0, 1, 2, None, 1).group == 1
    assert glob.step_plan(0, 1, 0, None, 3).group == 1  # no workers: one batch per item
    shard = sk.StreamingDataset(roots["plain"], batch_size=2)
    assert shard.step_plan(0, 1, 2, None, 3) is shard.step_plan(0, 1, 2, None, 1)
    assert glob.params.spread == 1  # one sequence (P29)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 4), st.integers(0, 3), st.integers(0, 5), st.data())
def test_a_global_reader_walks_its_shards_lazily(
        roots: dict[str, str], world: int, workers: int, ahead: int, data: st.DataObject) -> None:
    """P34, P35: ``iter_shards(c, s)`` yields ``shards_of(c, s)`` one at a time, its first ``k``
    shards after walking only the windows that first read them; a reader's prefetch list is that
    walk, not the whole epoch's list."""
    plan = maker(roots, "plain")(3).step_plan(0, world, workers, None, 2)
    assert isinstance(plan, GlobalOrderPlan)
    consumer = data.draw(st.integers(0, plan.num_consumers - 1))
    start = data.draw(st.integers(0, plan.num_batches(consumer))) * plan.params.batch_size
    whole = plan.shards_of(consumer, start)
    assert tuple(plan.iter_shards(consumer, start)) == whole
    near = tuple(itertools.islice(plan.iter_shards(consumer, start), ahead))
    assert near == whole[:ahead]
    upcoming = upcoming_shards(plan, consumer, start)
    assert not isinstance(upcoming, list | tuple) and tuple(upcoming) == whole


def memory_dataset(count: int) -> str:
    url = f"memory://global-{uuid.uuid4().hex}"
    with sk.ShardWriter(url, shard_size="4KiB", block_size="1KiB") as writer:
        for index in range(count):
            writer.write({"id": index, "text": f"sample {index} " * 4})
    return url


@pytest.mark.parametrize("mixed", [False, True])
def test_a_remote_dataset_in_global_order_prefetches_through_the_node_cache(tmp_path: Any, mixed: bool) -> None:
    """P35 through a node cache (K10): the same global batches as range reads without one, every
    shard fetched once by the lazy look-ahead or the reader (a mixture's sources share one walk)."""
    urls = [memory_dataset(120), memory_dataset(50)] if mixed else [memory_dataset(150)]
    path: Any = sk.Mixture([sk.Source(u, 1.0, f"s{i}") for i, u in enumerate(urls)]) if mixed else urls[0]

    def run(cache_dir: Any) -> tuple[list[Batch], sk.StreamingDataset]:
        ds = sk.StreamingDataset(path, batch_size=4, order="global", shuffle_window=16, with_index=True,
                                 cache_dir=cache_dir, data_parallel=(1, 2))
        return [record(b) for b in sk.ShardLoader(ds)], ds

    cached, ds = run(str(tmp_path / "cache"))
    plain, _ = run(False)
    assert cached == plain and len(cached) > 5
    stats = ds._shard_cache().stats  # noqa: SLF001 - the job's own cache counters
    shards = sum(len(sk.StreamingDataset(u, batch_size=1).dataset.manifest.shards) for u in urls)
    assert stats is not None and 0 < stats.misses <= shards
