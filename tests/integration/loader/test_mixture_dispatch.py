"""``sk.StreamingDataset(mixture_or_file, ...)`` reads a mixture (specs/mixture.md, "Reading and
the loader"; its epoch source is a ``MixtureSource``, specs/partition.md §Components): a
``Mixture``, a .toml or .json mixture file; a dataset path reads one dataset; the result pickles
(spawn-started workers) and streams the mixture."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from pathlib import Path

import pytest

import shardkit as sk
from shardkit.errors import PlanError
from shardkit.loader.dataset_source import DatasetSource
from shardkit.loader.mixture_source import MixtureSource
from shardkit.plan import PlanParams
from tests.helpers.datasets import write_dataset
from tests.helpers.mixture_strategies import expected_multiset

SIZES = {"web": [20, 11], "code": [6]}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("dispatch")
    return {name: write_dataset(str(root / name), sizes) for name, sizes in SIZES.items()}


def test_a_mixture_or_a_mixture_file_makes_a_mixture_dataset(roots: dict[str, str], tmp_path: Path) -> None:
    mix = sk.Mixture([sk.Source(roots["web"], 0.75), sk.Source(roots["code"], 0.25)], samples_per_epoch=40)
    toml = tmp_path / "mix.toml"
    toml.write_text(f'samples_per_epoch = 40\n[[sources]]\npath = "{roots["web"]}"\nweight = 0.75\n'
                    f'[[sources]]\npath = "{roots["code"]}"\nweight = 0.25\n')
    as_json = tmp_path / "mix.json"
    as_json.write_text(json.dumps({"samples_per_epoch": 40, "sources": [{"path": roots["web"], "weight": 0.75},
                                                                        {"path": roots["code"], "weight": 0.25}]}))
    made = [sk.StreamingDataset(m, batch_size=4, seed=3, with_index=True) for m in (mix, str(toml), str(as_json))]
    for dataset in made:
        assert type(dataset) is sk.StreamingDataset and isinstance(dataset.source, MixtureSource)
        assert dataset.source.spec.names == ("web", "code") and dataset.source.spec.counts(0).tolist() == [30, 10]
        assert dataset.fingerprint == made[0].fingerprint
    got = [i for batch in sk.ShardLoader(made[1]) for i in batch["_index"].tolist()]
    assert collections.Counter(got) == expected_multiset(made[1].source.spec, PlanParams(seed=3, batch_size=4))
    assert len(got) == 40


@pytest.mark.slow
def test_a_spawn_started_worker_gets_the_mixture_dataset(roots: dict[str, str]) -> None:
    """A spawn-started worker unpickles the dataset: it must come back reading the mixture."""
    mix = sk.Mixture([sk.Source(roots["web"], 0.75), sk.Source(roots["code"], 0.25)], samples_per_epoch=40)
    dataset = sk.StreamingDataset(mix, batch_size=4, seed=3, with_index=True, with_source=True)
    loader = sk.ShardLoader(dataset, num_workers=1, multiprocessing_context="spawn")
    got = [(i, s) for batch in loader for i, s in zip(batch["_index"].tolist(), batch["_source"].tolist(), strict=True)]
    want = expected_multiset(dataset.source.spec, PlanParams(seed=3, batch_size=4))
    assert collections.Counter(i for i, _ in got) == want
    assert collections.Counter(s for _, s in got) == {0: 30, 1: 10}
    assert loader.stats()["sources"] == {"web": 30, "code": 10}


def test_a_dataset_path_stays_a_streaming_dataset(roots: dict[str, str]) -> None:
    plain = sk.StreamingDataset(roots["web"], batch_size=4)
    assert type(plain) is sk.StreamingDataset and isinstance(plain.source, DatasetSource)
    with pytest.raises(TypeError, match="a dataset path or a Mixture"):
        sk.StreamingDataset(42, batch_size=4)  # type: ignore[arg-type]


def test_a_mixture_is_checked_as_a_mixture_sources_smaller_than_a_batch_work(tmp_path: Path) -> None:
    """P16 for a mixture counts its epoch (``samples_per_epoch``), not any one source: three
    sources of 60 samples upsampled to 3,000 per epoch at batch 64 yield 46 full batches."""
    roots = [write_dataset(str(tmp_path / f"s{i}"), [60]) for i in range(3)]
    mix = sk.Mixture([sk.Source(root, 1.0, f"s{i}") for i, root in enumerate(roots)], samples_per_epoch=3000)
    dataset = sk.StreamingDataset(mix, batch_size=64, with_source=True)
    batches = list(sk.ShardLoader(dataset))
    assert len(batches) == 3000 // 64 and all(len(b["_source"]) == 64 for b in batches)
    tiny = sk.Mixture([sk.Source(root, 1.0, f"s{i}") for i, root in enumerate(roots)], samples_per_epoch=63)
    with pytest.raises(PlanError, match="63 samples"):  # an epoch smaller than a batch: still refused
        sk.StreamingDataset(tiny, batch_size=64)


def test_a_worker_opens_each_source_store_once_not_once_per_iteration(roots: dict[str, str]) -> None:
    """After a fork a dataset's store is reopened (async clients are not fork-safe), once per
    process: a persistent worker's second iteration reuses the stores of its first, for one
    dataset and for every source of a mixture."""
    mix = sk.Mixture([sk.Source(roots["web"], 0.75), sk.Source(roots["code"], 0.25)], samples_per_epoch=40)
    for dataset in (sk.StreamingDataset(mix, batch_size=4), sk.StreamingDataset(roots["web"], batch_size=4)):
        source = dataset.source
        forked = tuple(dataclasses.replace(ds, pid=-1) for ds in source.datasets)  # as opened in the parent
        if isinstance(source, MixtureSource):
            source.opened.datasets = forked
        else:
            source.dataset = forked[0]
        source.receive(source.payload())
        first = source.datasets
        assert all(ds.pid == os.getpid() and ds.store is not old.store for ds, old in zip(first, forked, strict=True))
        source.receive(source.payload())
        assert all(a is b for a, b in zip(source.datasets, first, strict=True))
