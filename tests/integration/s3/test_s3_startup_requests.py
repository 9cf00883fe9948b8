"""Object-store requests at startup are O(nodes), not O(ranks × workers) (K18, M14, M15):
simulated nodes (one cache dir each) × ranks × DataLoader workers against the moto server
behind the counting proxy."""

from __future__ import annotations

import collections
import logging
from typing import Any

import numpy as np
import pytest
import torch.multiprocessing as mp

import shardkit as sk
from shardkit.format.manifest_companion import ShardTable
from shardkit.read import manifest_open, open_dataset
from shardkit.storage import ShardCache
from shardkit.write import output
from tests.helpers.fault_proxy import FaultProxy
from tests.helpers.s3 import storage_options
from tests.integration.s3.s3_ranks import open_rank

pytestmark = [pytest.mark.s3, pytest.mark.filterwarnings("ignore::UserWarning:torch.utils.data.dataloader")]
log = logging.getLogger(__name__)


def _pack(url: str, options: dict[str, Any], count: int = 300) -> None:
    rng = np.random.default_rng(3)
    with sk.ShardWriter(url, shard_size="8KiB", block_size="2KiB", storage_options=options) as writer:
        for i in range(count):
            writer.write({"id": i, "tokens": rng.integers(0, 1000, int(rng.integers(8, 64)), dtype=np.int32)})


def _requests(proxy: FaultProxy) -> collections.Counter[tuple[str, str]]:
    """Requests per (method, object kind) — the startup report."""
    def kind(key: str) -> str:
        return key.rsplit("/", 1)[-1] if "/shards/" not in key else "shard"
    return collections.Counter((r.method, kind(r.key)) for r in proxy.records(None))


@pytest.mark.slow
def test_manifest_is_fetched_once_per_node_whatever_the_ranks_and_workers(
        s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy, tmp_path: Any) -> None:
    """K18: 2 nodes × 2 ranks × 2 workers: manifest GETs == 2 (nodes); one HEAD per rank process
    (its version); DataLoader workers ask for nothing of the manifest."""
    url = f"{s3_bucket[0]}/ds"
    _pack(url, s3_bucket[1])
    nodes, ranks_per_node = 2, 2
    spec = {"ranks_per_node": ranks_per_node, "workers": 2}
    mp.spawn(open_rank, args=(nodes * ranks_per_node, url, storage_options(fault_proxy.endpoint_url),
                              str(tmp_path), spec), nprocs=nodes * ranks_per_node, join=True)
    counts = _requests(fault_proxy)
    log.info("startup requests, %d nodes x %d ranks x 2 workers: %s", nodes, ranks_per_node, dict(counts))
    assert counts[("GET", "manifest.json")] == nodes, dict(counts)
    assert counts[("HEAD", "manifest.json")] == nodes * ranks_per_node, dict(counts)
    assert not counts[("GET", "manifest.bin")] and not counts[("HEAD", "manifest.bin")]  # small: no companion


def test_large_manifest_companion_through_the_node_cache(
        s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy, tmp_path: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """M15 + K18: a manifest large enough for a companion: per node one GET of manifest.json and
    one of manifest.bin; every open decodes the companion (no JSON parse); a republished
    dataset (another version of manifest.json) is fetched anew."""
    monkeypatch.setattr(output, "COMPANION_MIN_BYTES", 1)
    monkeypatch.setattr(manifest_open, "COMPANION_MIN_BYTES", 1)
    url = f"{s3_bucket[0]}/ds"
    _pack(url, s3_bucket[1])
    options = storage_options(fault_proxy.endpoint_url)
    caches = [ShardCache(str(tmp_path / f"node{n}"), 1 << 30) for n in range(2)]
    opened = [open_dataset(url, options, cache).manifest for cache in caches for _ in range(3)]
    assert all(isinstance(m.shards, ShardTable) and m.fingerprint == opened[0].fingerprint for m in opened)
    counts = _requests(fault_proxy)
    assert counts[("GET", "manifest.json")] == 2 and counts[("GET", "manifest.bin")] == 2, dict(counts)
    with sk.ShardWriter(url, shard_size="8KiB", storage_options=s3_bucket[1], overwrite=True) as writer:
        for i in range(50):
            writer.write({"id": i, "tokens": np.zeros(3, dtype=np.int32)})
    republished = open_dataset(url, options, caches[0]).manifest
    assert republished.num_samples == 50 and republished.fingerprint != opened[0].fingerprint
    assert _requests(fault_proxy)[("GET", "manifest.json")] == 3
