"""A 3-source mixture streamed from a real S3 server (moto, behind the counting proxy) through
the node-local cache with DataLoader workers, stopped mid-epoch and resumed elastically
(specs/mixture.md MX1, MX5; "Reading and the loader")."""

from __future__ import annotations

import collections
import json
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from shardkit.plan import PlanParams
from shardkit.read import open_dataset
from tests.helpers.fault_proxy import FaultProxy
from tests.helpers.mixture_sources import SOURCES, write_sources
from tests.helpers.mixture_strategies import expected_multiset
from tests.helpers.s3 import storage_options

pytestmark = [pytest.mark.s3, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::UserWarning:torch.utils.data.dataloader")]


@pytest.fixture
def s3_sources(s3_bucket: tuple[str, dict[str, Any]]) -> dict[str, str]:
    return write_sources(*s3_bucket)


def loader(urls: dict[str, str], options: dict[str, Any], cache: str, batch_size: int, workers: int) -> sk.ShardLoader:
    mixture = sk.Mixture([sk.Source(urls[name], weight, name) for name, (_, weight) in SOURCES.items()],
                         samples_per_epoch=400, composition="stratified")
    dataset = sk.StreamingDataset(mixture, batch_size=batch_size, tail="pad", shuffle_window=32, with_index=True,
                                with_source=True, cache_dir=cache, storage_options=options)
    return sk.ShardLoader(dataset, num_workers=workers)


def take(shard_loader: sk.ShardLoader, steps: int | None) -> list[int]:
    bases = shard_loader.streaming.source._sample_bases  # noqa: SLF001
    out: list[int] = []
    for step, batch in enumerate(shard_loader):
        index, source = batch["_index"].numpy(), batch["_source"].numpy()
        assert (batch["id"].numpy() == index - bases[source]).all()  # decoded from the right source
        out += index[~batch["_padded"].numpy()].tolist()
        if steps is not None and step + 1 == steps:
            break
    return out


def test_mixture_from_s3_through_the_cache_resumes_elastically(
    s3_sources: dict[str, str], fault_proxy: FaultProxy, tmp_path: Any
) -> None:
    options, cache = storage_options(fault_proxy.endpoint_url), str(tmp_path / "cache")
    first = loader(s3_sources, options, cache, batch_size=8, workers=2)
    consumed = take(first, 12)
    state = json.loads(json.dumps(first.state_dict()))
    second = loader(s3_sources, options, cache, batch_size=5, workers=1)
    second.load_state_dict(state)
    rest = take(second, None)
    spec = first.streaming.source.spec
    want = expected_multiset(spec, PlanParams(seed=0, epoch=0, batch_size=8, tail="pad", shuffle_window=32))
    assert collections.Counter(consumed + rest) == want
    per_source = collections.Counter(np.searchsorted(first.streaming.source._sample_bases,  # noqa: SLF001
                                                     consumed + rest, side="right") - 1)
    assert [per_source[i] for i in range(3)] == spec.counts(0).tolist() == [240, 120, 40]
    for name, url in s3_sources.items():  # at most one download per shard, across both loaders
        served = {shard.name: (fault_proxy.bytes_served(f"/{name}/{shard.name}"), shard.num_bytes)
                  for shard in open_dataset(url, options).manifest.shards}
        assert all(got in (0, size) for got, size in served.values()), (name, served)
        if name != "web":  # code and math are read whole this epoch (1 and 1.33 passes)
            assert all(got == size for got, size in served.values()), (name, served)
