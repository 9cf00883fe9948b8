"""Reading a mixture plan from real datasets (specs/mixture.md "Reading", MX1/MX5): every
consumer's samples, decoded from the right source's shards, are the epoch's multiset."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

from shardkit.plan import PlanParams, shard_offsets
from shardkit.plan.mixture.state import mixture_plan, mixture_shard_sizes, shard_bases
from shardkit.read.mixture.config import Mixture, Source, open_mixture
from shardkit.read.mixture.stream import iter_mixture_consumer, source_of_indices
from tests.helpers.datasets import expected_sample, write_dataset
from tests.helpers.mixture_strategies import dropped_ids, expected_multiset

SIZES = {"web": [30, 0, 25, 12], "code": [9, 4], "math": [3]}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mix")
    return {name: write_dataset(str(root / name), sizes) for name, sizes in SIZES.items()}


@pytest.mark.parametrize("composition", ["random", "stratified"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_consumers_read_the_epoch_multiset_from_the_right_sources(
    sources: dict[str, str], composition: str, shuffle: bool, tmp_path: Path
) -> None:
    mixture = Mixture([Source(sources["web"], 0.6), Source(sources["code"], 0.3), Source(sources["math"], 0.1)],
                      samples_per_epoch=150, composition=composition)
    opened = open_mixture(mixture)
    spec = opened.spec()
    params = PlanParams(seed=5, epoch=1, world_size=2, num_workers=2, batch_size=4, shuffle=shuffle,
                        shuffle_window=16)
    plan = mixture_plan(spec, params)
    bases = shard_offsets(mixture_shard_sizes(spec))[shard_bases(spec)]
    got: collections.Counter[int] = collections.Counter()
    for consumer in range(plan.num_consumers):
        for piece in iter_mixture_consumer(opened, plan, consumer, 0):
            source = source_of_indices(bases, piece.indices)
            for sample, index, src in zip(piece.samples, piece.indices.tolist(), source.tolist(), strict=True):
                local = index - int(bases[src])
                assert sample["id"] == local and sample["text"] == expected_sample(local)["text"]
                got[index] += 1
    want = expected_multiset(spec, params)
    want.subtract(dropped_ids(plan))
    assert got == +want
    per_source = np.bincount(source_of_indices(bases, np.array(list(got.elements()))), minlength=3)
    assert per_source.sum() == 150 - plan.num_dropped
