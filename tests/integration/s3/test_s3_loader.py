"""Streaming from a real S3 HTTP server (moto) through the fault-injecting proxy
(G7, G8 in docs/guarantees.md; target T3 in benchmarks/README.md).

Every test packs a dataset into a fresh bucket with ``ShardWriter("s3://…")``, then reads it
through ``tests/helpers/fault_proxy.py``, which counts every GET per object.
"""

from __future__ import annotations

import collections
import json
from typing import Any

import numpy as np
import pytest
import torch.multiprocessing as mp

import shardkit as sk
from tests.helpers.fault_proxy import Fault, FaultProxy
from tests.helpers.s3 import storage_options, write_s3_tokens
from tests.integration.s3.s3_ranks import stream_rank

pytestmark = [pytest.mark.s3, pytest.mark.filterwarnings("ignore::UserWarning:torch.utils.data.dataloader")]

NUM_SAMPLES = 600


@pytest.fixture
def s3_dataset(s3_bucket: tuple[str, dict[str, Any]]) -> tuple[str, sk.Manifest]:
    """600 samples of ragged int32 arrays in ~11 shards, written straight to S3."""
    return write_s3_tokens(
        s3_bucket, NUM_SAMPLES, lambda rng: rng.integers(0, 1000, int(rng.integers(8, 64)), dtype=np.int32),
        seed=7, shard_size="8KiB", block_size="2KiB",
    )


def _through(proxy: FaultProxy) -> dict[str, Any]:
    return storage_options(proxy.endpoint_url)


def _epoch_indices(url: str, options: dict[str, Any], **kwargs: Any) -> list[int]:
    """One epoch through 2 DataLoader workers; the real (unpadded) global indices received."""
    dataset = sk.StreamingDataset(url, batch_size=8, with_index=True, tail="pad", shuffle_window=64,
                                  storage_options=options, **kwargs)
    loader = sk.ShardLoader(dataset, num_workers=2)
    out: list[int] = []
    for batch in loader:
        out += batch["_index"][~batch["_padded"]].tolist()
    return out


def _shard_key(name: str) -> str:
    return "/ds/" + name


@pytest.mark.slow
def test_two_ranks_two_workers_share_one_cache_one_download_per_shard(
    s3_dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy, tmp_path: Any
) -> None:
    """G2 + G7/K3: 2 gloo ranks × 2 workers, one cache dir: every sample exactly once, and each
    shard object served exactly once in full by the server (counted at the proxy)."""
    url, manifest = s3_dataset
    spec = {"batch_size": 8, "tail": "pad", "workers": 2, "cache_dir": str(tmp_path / "cache")}
    mp.spawn(stream_rank, args=(2, url, _through(fault_proxy), str(tmp_path), spec), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(ranks[0]["steps"]) == len(ranks[1]["steps"]) > 0  # G3
    seen = collections.Counter(i for rank in ranks for step in rank["steps"] for i in step)
    assert sorted(seen) == list(range(NUM_SAMPLES)) and set(seen.values()) == {1}
    for shard in manifest.shards:
        assert fault_proxy.bytes_served(_shard_key(shard.name)) == shard.num_bytes, shard.name


def test_cache_limit_below_dataset_size(s3_dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy,
                                        tmp_path: Any) -> None:
    """K5/K6: a cache limit of half the dataset or less: exactly once, disk use within the limit."""
    url, manifest = s3_dataset
    limit = 3 * max(s.num_bytes for s in manifest.shards)  # room for 2 leases + 1 prefetch
    assert limit <= manifest.num_bytes // 2
    cache = tmp_path / "cache"
    indices = _epoch_indices(url, _through(fault_proxy), cache_dir=str(cache), cache_limit=limit)
    assert sorted(indices) == list(range(NUM_SAMPLES))
    on_disk = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file() and not f.name.endswith(".lock"))
    assert on_disk <= limit + max(s.num_bytes for s in manifest.shards)


def test_range_requests_without_cache(s3_dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy) -> None:
    """T3 / G7 "without a cache dir": blocks stream by range requests; no whole-shard GET."""
    url, manifest = s3_dataset
    indices = _epoch_indices(url, _through(fault_proxy))
    assert sorted(indices) == list(range(NUM_SAMPLES))
    shard_gets = [r for r in fault_proxy.records("GET") if "/shards/" in r.key]
    assert shard_gets and all(r.range for r in shard_gets)
    largest = max(s.num_bytes for s in manifest.shards)
    assert max(r.bytes_sent for r in shard_gets) < largest


def test_first_batch_is_a_handful_of_requests(s3_dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy) -> None:
    """T3: time to first batch costs a few range requests, not a whole-shard download."""
    url, _ = s3_dataset
    dataset = sk.StreamingDataset(url, batch_size=4, shuffle=False, storage_options=_through(fault_proxy))
    before = len(fault_proxy.records(None))
    next(iter(sk.ShardLoader(dataset, num_workers=0)))
    requests = fault_proxy.records(None)[before:]
    assert len(requests) <= 4, [(r.method, r.key, r.range) for r in requests]


def test_transient_faults_lose_nothing(s3_dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy,
                                       tmp_path: Any) -> None:
    """G8: 503s, resets and truncated bodies at a steady rate: retried; exactly once, same bytes."""
    url, _ = s3_dataset
    for kind in ("status", "reset", "truncate"):
        fault_proxy.add(Fault(kind=kind, rate=0.08, key="/shards/"))
    indices = _epoch_indices(url, _through(fault_proxy), cache_dir=str(tmp_path / "cache"))
    assert sorted(indices) == list(range(NUM_SAMPLES))
    assert sum(r.fault is not None for r in fault_proxy.records(None)) > 0


@pytest.mark.slow
def test_throttling_and_stalled_responses_lose_nothing_k21_k22(
    s3_dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy, tmp_path: Any
) -> None:
    """K21/K22 through the loader and its workers: 503 SlowDown at a steady rate and two
    responses stalled for 5 s; every sample exactly once, nothing hangs. (These shards are
    below ``hedge_min_bytes``, so the stalls are waited out; hedging itself is tested in
    tests/integration/storage/test_storage_parallel_download.py.)"""
    url, _ = s3_dataset
    fault_proxy.add(Fault(kind="status", status=503, rate=0.15, key="/shards/"))
    stall = fault_proxy.add(Fault(kind="slow", requests=frozenset({2, 6}), key="/shards/", delay=5.0))
    indices = _epoch_indices(url, _through(fault_proxy), cache_dir=str(tmp_path / "cache"))
    assert sorted(indices) == list(range(NUM_SAMPLES))
    assert stall.fired == 2 and any(r.fault == "status" for r in fault_proxy.records("GET"))


def test_loader_stats_count_download_parts_retries_and_throttling_k21(
    s3_dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy, tmp_path: Any
) -> None:
    """G10: ``loader.stats()["cache"]`` counts the cache downloads' part requests, the retries,
    the throttled answers and the hedges (these shards are one part each, below hedging)."""
    url, manifest = s3_dataset
    fault_proxy.add(Fault(kind="status", status=503, requests=frozenset({1, 2}), key="/shards/"))
    dataset = sk.StreamingDataset(url, batch_size=8, storage_options=_through(fault_proxy),
                                  cache_dir=str(tmp_path / "cache"))
    loader = sk.ShardLoader(dataset, num_workers=0)
    assert sum(len(batch["id"]) for batch in loader) == NUM_SAMPLES
    cache = loader.stats()["cache"]
    assert cache["download_parts"] == len(manifest.shards)
    assert cache["download_throttled"] == cache["download_retries"] == 2
    assert cache["download_hedged"] == 0
