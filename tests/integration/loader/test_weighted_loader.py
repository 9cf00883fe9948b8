"""Per-sample weights through ``ShardLoader`` (specs/sample-weights.md): a weight field or array
gives the epoch multiset of the plan, with 2 workers, across a kill and an elastic resume; other
weights, another epoch size or an unweighted state are refused by name."""

from __future__ import annotations

import collections
import json
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from shardkit.errors import PlanError, StateError
from shardkit.plan.sample_weights import multiplicities
from shardkit.read.field_values import FieldValueError
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)
NUM_SAMPLES = 160
LABELS = (np.arange(NUM_SAMPLES) % 8 == 0).astype(np.int64)  # class 1: 20 samples, class 0: 140
PARAMS: dict[str, Any] = {"seed": 5, "shuffle_window": 16, "with_index": True}


def balanced(labels: np.ndarray) -> np.ndarray:
    """The README's class-balanced weights: 1 / (samples of the class)."""
    return 1.0 / np.bincount(labels)[labels]


@pytest.fixture(scope="module", params=[("rows", 200), ("auto", 700)], ids=["row blocks", "column blocks"])
def root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """160 samples in several shards, with ``label`` and ``weight`` fields (row or column blocks)."""
    layout, block_size = request.param
    folder = str(tmp_path_factory.mktemp(f"weighted_{layout}"))
    weights = balanced(LABELS)
    with sk.ShardWriter(folder, shard_size=1000, block_size=block_size, layout=layout) as writer:
        for i in range(NUM_SAMPLES):
            writer.write({"id": i, "label": int(LABELS[i]), "weight": float(weights[i]), "name": f"s{i}"})
    return folder


def received(shard_loader: sk.ShardLoader, steps: int | None = None) -> list[int]:
    """Manifest indices of the real samples the loop received, up to ``steps`` batches."""
    got: list[int] = []
    for step, batch in enumerate(shard_loader):
        assert (batch["_index"] == batch["id"]).all()
        real = ~batch["_padded"].numpy() if "_padded" in batch else np.ones(len(batch["id"]), dtype=bool)
        got += batch["_index"].numpy()[real].tolist()
        if steps is not None and step + 1 == steps:
            break
    return got


def planned(dataset: Any, epoch: int) -> collections.Counter[int]:
    m = multiplicities(dataset.source.weights, dataset.source.samples_per_epoch, dataset.params.seed, epoch)
    return collections.Counter({j: int(k) for j, k in enumerate(m) if k})


def test_a_weight_field_gives_the_planned_multiset_through_two_workers(root: str) -> None:
    """SW1, SW4 (G2, G3): an epoch through ShardLoader with W=2 is exactly the plan's multiset,
    and class-balanced weights balance the classes."""
    dataset = sk.StreamingDataset(root, batch_size=4, sample_weights="weight", tail="pad", **PARAMS)
    assert dataset.source.weights is not None and dataset.source.samples_per_epoch == NUM_SAMPLES
    shard_loader = sk.ShardLoader(dataset, num_workers=2)
    assert len(shard_loader) == NUM_SAMPLES // 4
    got = received(shard_loader)
    assert collections.Counter(got) == planned(dataset, 0)
    per_class = np.bincount(LABELS[got], minlength=2)
    assert abs(int(per_class[0]) - NUM_SAMPLES // 2) <= 3  # the classes' shares are 80 each (SW2)
    assert collections.Counter(received(shard_loader)) == planned(dataset, 1)  # the next epoch, another U
    assert planned(dataset, 1) != planned(dataset, 0)


def test_the_readme_class_balanced_example(root: str) -> None:
    """README: weights from a label field in two lines give each class its share (SW2)."""
    labels = sk.field_values(root, "label").astype(int)
    ds = sk.StreamingDataset(root, batch_size=32, sample_weights=1.0 / np.bincount(labels)[labels], **PARAMS)
    assert labels.tolist() == LABELS.tolist()
    from_field = sk.StreamingDataset(root, batch_size=32, sample_weights="weight")
    assert ds.source.weights.fingerprint == from_field.source.weights.fingerprint
    got = received(sk.ShardLoader(ds))
    assert collections.Counter(got) == planned(ds, 0)
    assert abs(int(np.bincount(LABELS[got], minlength=2)[1]) - NUM_SAMPLES // 2) <= 3


def test_a_killed_epoch_resumes_elastically_with_the_same_multiset(root: str) -> None:
    """SW4 (G5, G6): killed after 7 steps on 2 workers × batch 4, resumed on 1 worker × batch 3
    and then again on 2 workers × batch 5: the samples received equal the epoch multiset."""
    weights = balanced(LABELS) * 3.0  # scaling changes nothing (normalised)

    def make(batch: int) -> Any:
        return sk.StreamingDataset(
            root, batch_size=batch, sample_weights=weights, samples_per_epoch=230, tail="pad", **PARAMS
        )

    first = sk.ShardLoader(make(4), num_workers=2)
    first.set_epoch(2)
    consumed = received(first, 7)
    state = json.loads(json.dumps(first.state_dict()))
    fingerprint = first.streaming.source.weights.fingerprint
    assert state["sample_weights"] == {"fingerprint": fingerprint, "samples_per_epoch": 230}
    second = sk.ShardLoader(make(3), num_workers=1)
    second.load_state_dict(state)
    consumed += received(second, 5)
    third = sk.ShardLoader(make(5), num_workers=2)
    third.load_state_dict(second.state_dict())
    consumed += received(third)
    assert collections.Counter(consumed) == planned(first.streaming, 2)
    assert sum(collections.Counter(consumed).values()) == 230


def test_copies_are_separate_dicts_for_an_in_place_transform(root: str) -> None:
    """SW8: an in-place transform sees every copy of a sample once (never an already-changed copy)."""

    def bump(sample: dict[str, Any]) -> dict[str, Any]:
        sample["id"] = sample["id"] + 1000
        return sample

    dataset = sk.StreamingDataset(root, batch_size=4, sample_weights="weight", transform=bump, **PARAMS)
    for batch in sk.ShardLoader(dataset):
        assert (batch["id"] == batch["_index"] + 1000).all()


def augment(sample: dict[str, Any], ctx: sk.SampleContext) -> dict[str, Any]:
    return {"id": sample["id"], "copy": ctx.copy, "draw": ctx.rng().random()}


def test_every_copy_gets_its_own_context_and_draw(root: str) -> None:
    """SW8: ``ctx.copy`` numbers a sample's copies 0 .. m - 1 across the epoch (2 workers), copy 0
    draws exactly ``sample_rng(seed, epoch, index)`` (P11) and the other copies draw otherwise."""
    dataset = sk.StreamingDataset(root, batch_size=4, sample_weights="weight", transform=augment, **PARAMS)
    draws: dict[int, dict[int, float]] = collections.defaultdict(dict)
    for batch in sk.ShardLoader(dataset, num_workers=2):
        for index, copy, draw in zip(
            batch["_index"].tolist(), batch["copy"].tolist(), batch["draw"].tolist(), strict=True
        ):
            assert copy not in draws[index]
            draws[index][copy] = draw
    expected = planned(dataset, 0)
    assert {index: sorted(found) for index, found in draws.items()} == {i: list(range(k)) for i, k in expected.items()}
    for index, found in draws.items():
        assert found[0] == sk.sample_rng(PARAMS["seed"], 0, index).random()
        assert len(set(found.values())) == len(found)


def test_other_weights_or_epoch_sizes_are_refused_by_name(root: str) -> None:
    """SW7: a state planned with other weights, another samples_per_epoch, or without weights."""
    first = sk.ShardLoader(sk.StreamingDataset(root, batch_size=4, sample_weights="weight", **PARAMS))
    received(first, 3)
    state = first.state_dict()
    changed = balanced(LABELS)
    changed[7] *= 2
    with pytest.raises(StateError, match="sample weights changed.*sample_weights of"):
        sk.ShardLoader(sk.StreamingDataset(root, batch_size=4, sample_weights=changed)).load_state_dict(state)
    with pytest.raises(StateError, match="samples_per_epoch was 160 .* now 100"):
        sk.ShardLoader(
            sk.StreamingDataset(root, batch_size=4, sample_weights="weight", samples_per_epoch=100)
        ).load_state_dict(state)
    with pytest.raises(StateError, match="saved with sample weights"):
        sk.ShardLoader(sk.StreamingDataset(root, batch_size=4)).load_state_dict(state)
    plain = sk.ShardLoader(sk.StreamingDataset(root, batch_size=4, **PARAMS))
    received(plain, 1)
    with pytest.raises(StateError, match="saved without sample weights"):
        sk.ShardLoader(sk.StreamingDataset(root, batch_size=4, sample_weights="weight")).load_state_dict(
            plain.state_dict()
        )


def test_bad_weight_inputs_are_refused_naming_the_place(root: str) -> None:
    """SW6, SW10: a missing or non-numeric field, a wrong-length array, an epoch smaller than a
    batch, None, and a mixture."""
    with pytest.raises(FieldValueError, match="no field 'w' in the schema.*weight"):
        sk.StreamingDataset(root, batch_size=4, sample_weights="w")
    with pytest.raises(FieldValueError, match=r"shard .*: sample 0 \(manifest order\): field 'name'"):
        sk.StreamingDataset(root, batch_size=4, sample_weights="name")
    with pytest.raises(PlanError, match=f"expected {NUM_SAMPLES} weights"):
        sk.StreamingDataset(root, batch_size=4, sample_weights=np.ones(3))
    with pytest.raises(PlanError, match="3 samples"):
        sk.StreamingDataset(root, batch_size=4, sample_weights="weight", samples_per_epoch=3)
    assert sk.StreamingDataset(root, batch_size=4, sample_weights=None).source.weights is None  # None: unweighted
    with pytest.raises(TypeError, match="samples_per_epoch= sizes a weighted epoch"):
        sk.StreamingDataset(root, batch_size=4, samples_per_epoch=8)
    with pytest.raises(TypeError, match="not an option of a mixture.*sk.Source"):
        sk.StreamingDataset(
            sk.Mixture([sk.Source(root, 1.0, "a")], samples_per_epoch=10), batch_size=4, sample_weights="weight"
        )
