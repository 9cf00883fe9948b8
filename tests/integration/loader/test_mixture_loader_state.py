"""The mixture state through ``ShardLoader`` (specs/mixture.md MX7-MX10):
a loader resumed with new weights, an added and reordered source and another topology finishes
the started epoch as planned and continues every source's stream in the next; the state and
``stats()`` count per source what the loop received; a changed or removed source is refused
by name; single-dataset and older mixture states keep loading."""

from __future__ import annotations

import collections
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import StateError
from shardkit.plan import PlanParams
from shardkit.plan.mixture.spec import MixSpec
from shardkit.plan.mixture.state import resume_mixture
from tests.helpers.datasets import write_dataset
from tests.helpers.mixture_strategies import expected_multiset, source_of
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)
SIZES = {"web": [30, 0, 25, 12], "code": [9, 4], "math": [3], "extra": [7, 8]}
PARAMS = {"seed": 7, "tail": "pad", "shuffle_window": 8}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mixture_state")
    found = {name: write_dataset(str(root / name), sizes) for name, sizes in SIZES.items()}
    found["code2"] = write_dataset(str(root / "code2"), [10, 3])  # as many samples as "code", other shards
    return found


def mixture(roots: dict[str, str], weights: dict[str, float], paths: dict[str, str] | None = None) -> sk.Mixture:
    paths = paths or {}
    return sk.Mixture([sk.Source(roots[paths.get(name, name)], w, name) for name, w in weights.items()],
                      samples_per_epoch=150, composition="stratified")


OLD = {"web": 0.6, "code": 0.3, "math": 0.1}
NEW = {"extra": 0.5, "math": 0.2, "code": 0.2, "web": 0.1}  # added, reordered, reweighted


def loader(mix: sk.Mixture, batch_size: int, num_workers: int) -> sk.ShardLoader:
    dataset = sk.StreamingDataset(mix, batch_size=batch_size, with_index=True, with_source=True, **PARAMS)
    return sk.ShardLoader(dataset, num_workers=num_workers)


def take(shard_loader: sk.ShardLoader, steps: int | None = None) -> list[tuple[str, int]]:
    """(source name, sample id) of every real sample received, up to ``steps`` batches."""
    names = shard_loader.streaming.source.spec.names
    bases = shard_loader.streaming.source._sample_bases  # noqa: SLF001
    got: list[tuple[str, int]] = []
    for step, batch in enumerate(shard_loader):
        real = ~batch["_padded"].numpy()
        assert (batch["_index"].numpy() - bases[batch["_source"].numpy()] == batch["id"].numpy()).all()
        got += [(names[s], int(i)) for s, i in zip(batch["_source"].numpy()[real], batch["id"].numpy()[real],
                                                   strict=True)]
        if steps is not None and step + 1 == steps:
            break
    return got


def planned(spec: MixSpec, epoch: int, batch_size: int) -> collections.Counter[tuple[str, int]]:
    """The plan layer's epoch multiset as (source name, sample id)."""
    params = PlanParams(epoch=epoch, batch_size=batch_size, **PARAMS)  # type: ignore[arg-type]
    ids = list(expected_multiset(spec, params).elements())
    sources = source_of(spec, ids)
    starts = np.cumsum([0] + [s.num_samples for s in spec.sources])
    return collections.Counter((spec.sources[s].name, i - int(starts[s])) for s, i in zip(sources, ids, strict=True))


def per_source(got: list[tuple[str, int]]) -> dict[str, int]:
    return dict(collections.Counter(name for name, _ in got))


def test_resume_with_a_new_mix_finishes_the_epoch_then_continues_every_stream(roots: dict[str, str]) -> None:
    """MX8 through the loader: new weights, an added source and another order and topology."""
    first = loader(mixture(roots, OLD), 4, 2)
    first.set_epoch(1)
    consumed = take(first, 9)
    state = json.loads(json.dumps(first.state_dict()))
    assert [e["consumed"] for e in state["mixture"]["sources"]] == [per_source(consumed).get(n, 0) for n in OLD]
    assert first.stats()["sources"] == {n: per_source(consumed).get(n, 0) for n in OLD}  # not the prefetched

    second = loader(mixture(roots, NEW), 3, 2)
    second.load_state_dict(state)
    rest = take(second)
    old_spec = first.streaming.source.spec
    assert collections.Counter(consumed + rest) == planned(old_spec, 1, 4)
    assert per_source(consumed + rest) == dict(zip(OLD, old_spec.counts(1).tolist(), strict=True))
    final = second.state_dict()  # the end of the epoch: every source consumed its count (tail pad)
    assert [(e["name"], e["consumed"]) for e in final["mixture"]["sources"]] == \
        list(zip(OLD, old_spec.counts(1).tolist(), strict=True))

    params = PlanParams(epoch=1, batch_size=3, world_size=1, num_workers=2, **PARAMS)  # type: ignore[arg-type]
    new_spec = sk.StreamingDataset(mixture(roots, NEW), batch_size=3, **PARAMS).source.spec
    mix_state = {**state["mixture"], "plan": state["plan"]}
    _, later = resume_mixture(new_spec, params, mix_state)
    second.set_epoch(2)
    assert collections.Counter(take(second)) == planned(later, 2, 3)  # the new mix, streams continued
    assert second.streaming.source.spec.cursors(2).tolist() == [0, 30, 90, 180]  # extra (new), math, code, web


def test_a_chain_of_resumes_accumulates_consumed_per_source(roots: dict[str, str]) -> None:
    first = loader(mixture(roots, OLD), 4, 0)
    consumed = take(first, 5)
    state = first.state_dict()
    second = loader(mixture(roots, OLD), 5, 2)
    second.load_state_dict(state)
    assert second.state_dict()["mixture"] == state["mixture"]  # before any batch: the loaded boundary
    more = take(second, 4)
    again = second.state_dict()
    assert [e["consumed"] for e in again["mixture"]["sources"]] == [per_source(consumed + more).get(n, 0) for n in OLD]
    assert second.stats()["sources"] == {n: per_source(more).get(n, 0) for n in OLD}  # this iteration only
    third = loader(mixture(roots, OLD), 2, 1)
    third.load_state_dict(again)
    assert collections.Counter(consumed + more + take(third)) == planned(first.streaming.source.spec, 0, 4)


def test_a_changed_or_removed_source_is_refused_by_name(roots: dict[str, str]) -> None:
    first = loader(mixture(roots, OLD), 4, 0)
    take(first, 3)
    state = first.state_dict()
    with pytest.raises(StateError, match="'code'.*changed"):
        loader(mixture(roots, OLD, {"code": "code2"}), 4, 0).load_state_dict(state)
    with pytest.raises(StateError, match="'math'.*not in the mixture"):
        loader(mixture(roots, {"web": 0.6, "code": 0.4}), 4, 0).load_state_dict(state)
    broken = json.loads(json.dumps(state))
    broken["mixture"]["sources"][0]["count"] += 1
    with pytest.raises(StateError, match="counts"):
        loader(mixture(roots, OLD), 4, 0).load_state_dict(broken)
    with pytest.raises(StateError, match="saved by a mixture"):
        sk.ShardLoader(sk.StreamingDataset(roots["web"], batch_size=4)).load_state_dict(state)


def test_single_dataset_and_older_mixture_states_still_load(roots: dict[str, str]) -> None:
    one = sk.ShardLoader(sk.StreamingDataset(roots["web"], batch_size=4, with_index=True))
    batches = iter(one)
    next(batches)
    state: dict[str, Any] = one.state_dict()
    assert sorted(state) == ["epoch", "kind", "next", "plan", "steps", "version"]  # "next": R18
    assert state["plan"]["fingerprint"] == one.streaming.fingerprint
    assert "sources" not in one.stats()
    sk.ShardLoader(sk.StreamingDataset(roots["web"], batch_size=3)).load_state_dict(state)
    # a mixture state saved before loader states carried the mixture: fingerprinted by the mix
    first = loader(mixture(roots, OLD), 4, 0)
    consumed = take(first, 3)
    older = {k: v for k, v in first.state_dict().items() if k != "mixture"}
    older["plan"] = dict(older["plan"], fingerprint=first.streaming.source.spec.fingerprint())
    second = loader(mixture(roots, OLD), 4, 0)
    second.load_state_dict(older)
    assert collections.Counter(consumed + take(second)) == planned(first.streaming.source.spec, 0, 4)


def test_persistent_workers_get_a_state_loaded_after_they_started(roots: dict[str, str]) -> None:
    """The mixture part reaches persistent workers through the control block (L6)."""
    first = loader(mixture(roots, OLD), 4, 0)
    consumed = take(first, 6)
    state = first.state_dict()
    dataset = sk.StreamingDataset(mixture(roots, NEW), batch_size=4, with_index=True, with_source=True, **PARAMS)
    second = sk.ShardLoader(dataset, num_workers=2, persistent_workers=True)
    assert per_source(take(second)) == dict(zip(NEW, dataset.source.spec.counts(0).tolist(), strict=True))  # workers up
    second.load_state_dict(state)
    assert collections.Counter(consumed + take(second)) == planned(first.streaming.source.spec, 0, 4)


weights = st.floats(0.0, 4.0).map(lambda w: round(w, 2))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=st.tuples(weights, weights, weights).filter(lambda w: sum(w) > 0),
       new=st.tuples(weights, weights, weights, weights).filter(lambda w: sum(w[1:]) > 0),
       size=st.integers(1, 120), composition=st.sampled_from(["random", "stratified"]),
       batches=st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 7)),
       kills=st.tuples(st.integers(1, 12), st.integers(1, 12)))
def test_any_chain_of_resumes_with_new_mixes_delivers_the_plan(
    roots: dict[str, str], old: tuple[float, ...], new: tuple[float, ...], size: int, composition: str,
    batches: tuple[int, int, int], kills: tuple[int, int],
) -> None:
    """MX5, MX8-MX10 as a property: killed twice, resumed each time with another batch size and
    a new mix (the second adds a source in front); the epoch is the first mix's multiset, the
    state counts it per source, and the next epoch follows the plan layer's rebased mixture."""
    def mix(ws: dict[str, float]) -> sk.Mixture:
        return sk.Mixture([sk.Source(roots[n], w, n) for n, w in ws.items()], samples_per_epoch=size,
                          composition=composition)

    mixes = [mix(dict(zip(OLD, old, strict=True))), mix(dict(zip(OLD, new[1:], strict=True))),
             mix(dict(zip(["extra", *OLD], new, strict=True)))]
    got: list[tuple[str, int]] = []
    state: dict[str, Any] | None = None
    for i, (mixture_i, batch_size) in enumerate(zip(mixes, batches, strict=True)):
        current = loader(mixture_i, batch_size, 0)
        if state is not None:
            current.load_state_dict(json.loads(json.dumps(state)))
            current.set_epoch(0)  # stay in epoch 0 (a state saved at its end would go on to epoch 1: R10)
        got += take(current, kills[i] if i < 2 else None)
        state = current.state_dict()
        assert [(e["name"], e["consumed"]) for e in state["mixture"]["sources"]] == \
            [(n, per_source(got).get(n, 0)) for n in OLD]
        if i == 1:
            before_last = state
    first_spec = sk.StreamingDataset(mixes[0], batch_size=1, **PARAMS).source.spec
    assert collections.Counter(got) == planned(first_spec, 0, batches[0])
    params = PlanParams(batch_size=batches[2], **PARAMS)  # type: ignore[arg-type]
    mix_state = {**before_last["mixture"], "plan": before_last["plan"]}
    _, later = resume_mixture(sk.StreamingDataset(mixes[2], batch_size=1, **PARAMS).source.spec, params, mix_state)
    current.set_epoch(1)
    assert collections.Counter(take(current)) == planned(later, 1, batches[2])


def test_a_snapshot_boundary_counts_per_source_up_to_it(roots: dict[str, str]) -> None:
    """``state_dict(snapshot)`` (what DevicePrefetcher saves) counts up to that boundary only."""
    shard_loader = loader(mixture(roots, OLD), 4, 2)
    batches = iter(shard_loader)
    names = shard_loader.streaming.source.spec.names
    received: list[str] = []
    for _ in range(5):
        batch = next(batches)
        received += [names[s] for s in batch["_source"][~batch["_padded"]].tolist()]
    snapshot = shard_loader.consumed_snapshot()
    next(batches), next(batches)
    state = shard_loader.state_dict(snapshot)
    assert {e["name"]: e["consumed"] for e in state["mixture"]["sources"]} == \
        {n: received.count(n) for n in OLD}
    assert state["plan"]["offsets"] == shard_loader.state_dict(snapshot)["plan"]["offsets"]
    assert state != shard_loader.state_dict()
