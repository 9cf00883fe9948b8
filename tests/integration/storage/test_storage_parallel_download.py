"""Cache downloads in parallel ranged parts under one node-wide budget, slowing down when
throttled and hedging late parts (specs/cache.md, K20–K22), against moto through the proxy."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import time
from typing import Any

import pytest

from shardkit.storage import CacheOptions, ShardCache, Store, open_store
from shardkit.storage.budget import NodeBudget
from tests.helpers.fault_proxy import Fault, FaultProxy
from tests.helpers.s3 import storage_options
from tests.integration.storage import storage_workers as workers

pytestmark = [
    pytest.mark.s3,
    pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning:botocore"),
]

CTX = multiprocessing.get_context("spawn")
SIZE = 1024 * 1024
PART = 128 * 1024  # 8 parts per object
HANG = 120


@pytest.fixture
def objects(s3_bucket: tuple[str, dict[str, Any]]) -> dict[str, bytes]:
    url, options = s3_bucket
    direct = open_store(url, options)
    data = {f"ds/{i}.shard": os.urandom(SIZE) for i in range(4)}
    for name, payload in data.items():
        direct.write_atomic(name, payload)
    return data


def proxied(s3_bucket: tuple[str, dict[str, Any]], proxy: FaultProxy) -> Store:
    return open_store(s3_bucket[0], storage_options(proxy.endpoint_url))


def make_cache(path: Any, **overrides: Any) -> ShardCache:
    settings: dict[str, Any] = {
        "chunk_bytes": PART,
        "download_threads": 4,
        "node_connections": 4,
        "poll_interval": 0.02,
        "hedge_after": None,
        "hedge_min_bytes": 0,
    }
    settings.update(overrides)
    return ShardCache(str(path), 16 * SIZE, CacheOptions(**settings))


def fetch(cache: ShardCache, store: Store, name: str, payload: bytes) -> None:
    digest = hashlib.sha256(payload).hexdigest()
    with (
        cache.open(
            store, name, key=f"fp/{name}@{digest[:12]}", num_bytes=len(payload), verify=workers.verifier(digest)
        ) as path,
        open(path, "rb") as fh,
    ):
        assert fh.read() == payload


def test_a_shard_is_fetched_as_parallel_ranged_parts_k20(
    s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy, objects: dict[str, bytes], tmp_path: Any
) -> None:
    fault_proxy.add(Fault("slow", rate=1.0, key="ds/0.shard", delay=0.2))  # parts overlap
    cache = make_cache(tmp_path / "cache")
    fetch(cache, proxied(s3_bucket, fault_proxy), "ds/0.shard", objects["ds/0.shard"])
    gets = fault_proxy.records("GET", "ds/0.shard")
    assert sorted(r.range for r in gets) == sorted(  # type: ignore[type-var]
        f"bytes={s}-{s + PART - 1}" for s in range(0, SIZE, PART)
    )
    assert 2 <= fault_proxy.max_in_flight <= 4  # parts in parallel, within the budget
    assert cache.stats.parts == SIZE // PART


def test_throttling_lowers_concurrency_then_it_recovers_k21(
    s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy, objects: dict[str, bytes], tmp_path: Any
) -> None:
    cache = make_cache(tmp_path / "cache")
    store = proxied(s3_bucket, fault_proxy)
    fault_proxy.add(Fault("status", status=503, requests=frozenset(range(1, 7)), key="ds/0.shard"))
    fetch(cache, store, "ds/0.shard", objects["ds/0.shard"])  # no byte lost to the 503s
    pacing = cache.downloader().pacing
    assert cache.stats.throttled == 6
    assert pacing.decreases >= 1 and pacing.lowest < 4  # lowered...
    for name in ("ds/1.shard", "ds/2.shard", "ds/3.shard"):
        fetch(cache, store, name, objects[name])
    assert pacing.current == 4  # ...and back at the ceiling after throttling stopped


def test_429_is_throttling_too_k21(
    s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy, objects: dict[str, bytes], tmp_path: Any
) -> None:
    cache = make_cache(tmp_path / "cache")
    fault_proxy.add(Fault("status", status=429, requests=frozenset({1, 2}), key="ds/1.shard"))
    fetch(cache, proxied(s3_bucket, fault_proxy), "ds/1.shard", objects["ds/1.shard"])
    assert cache.stats.throttled == 2 and cache.downloader().pacing.decreases >= 1


def test_a_stalled_part_is_hedged_and_the_second_request_wins_k22(
    s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy, objects: dict[str, bytes], tmp_path: Any
) -> None:
    # The first GET (a first request, never a hedge) sends its 128 KiB in two 64 KiB pieces,
    # each after 30 s: a stall, not an error.
    fault_proxy.add(Fault("slow", requests=frozenset({1}), key="ds/2.shard", delay=30.0))
    cache = make_cache(tmp_path / "cache", hedge_after=0.5, download_threads=2)
    fetch(cache, proxied(s3_bucket, fault_proxy), "ds/2.shard", objects["ds/2.shard"])
    assert cache.stats.hedged >= 1 and cache.stats.hedge_wins >= 1
    stalled = [r for r in fault_proxy.records("GET", "ds/2.shard") if r.fault == "slow"]
    assert len(stalled) == 1 and not stalled[0].finished  # done without waiting for it
    again = [r for r in fault_proxy.records("GET", "ds/2.shard") if r.range == stalled[0].range]
    assert len(again) == 2  # the same range asked twice; the file was still verified whole


def test_a_hedge_is_not_queued_behind_the_request_it_overtakes_k22(
    s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy, objects: dict[str, bytes], tmp_path: Any
) -> None:
    """A 503 first brings the limit down to 1; the retry then stalls. Its hedge must not wait
    for the one request allowed in flight — the stalled one."""
    fault_proxy.add(Fault("status", status=503, requests=frozenset({1}), key="ds/3.shard"))
    fault_proxy.add(Fault("slow", requests=frozenset({2}), key="ds/3.shard", delay=30.0))
    cache = make_cache(tmp_path / "cache", hedge_after=0.5, download_threads=1)
    fetch(cache, proxied(s3_bucket, fault_proxy), "ds/3.shard", objects["ds/3.shard"])
    stalled = [r for r in fault_proxy.records("GET", "ds/3.shard") if r.fault == "slow"]
    assert len(stalled) == 1 and not stalled[0].finished  # done without waiting for it
    assert cache.downloader().pacing.lowest == 1 and cache.stats.hedge_wins >= 1


@pytest.mark.slow
def test_processes_share_one_node_budget_k20(
    s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy, objects: dict[str, bytes], tmp_path: Any
) -> None:
    """3 processes × 4 parts each would put 12 requests in flight; the node allows 2."""
    fault_proxy.add(Fault("slow", rate=1.0, key="ds/", delay=0.1))
    jobs = [
        _job(s3_bucket, fault_proxy, tmp_path, name, payload, node_connections=2)
        for name, payload in list(objects.items())[:3]
    ]
    assert workers.open_all_at_once(jobs, HANG) == ["ok"] * 3
    # The proxy counts a response until its handler returns from the last write, which may be
    # just after the client has it and let the next request go: hence the + 1.
    assert 2 <= fault_proxy.max_in_flight <= 3


@pytest.mark.slow
def test_a_sigkilled_downloader_leaks_no_budget_slot_k20(
    s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy, objects: dict[str, bytes], tmp_path: Any
) -> None:
    fault_proxy.add(Fault("slow", rate=1.0, key="ds/3.shard", delay=5.0))
    job = _job(s3_bucket, fault_proxy, tmp_path, "ds/3.shard", objects["ds/3.shard"], node_connections=3)
    budget = NodeBudget(make_cache(job.cache_dir).root, 3)
    child = CTX.Process(target=workers.open_only, args=(job,))
    child.start()
    deadline = time.monotonic() + HANG
    while budget.num_free() > 0:  # the child's parts hold every slot while they stall
        assert time.monotonic() < deadline and child.is_alive()
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=HANG)
    assert budget.num_free() == 3  # the kernel dropped the dead holder's flocks


def _job(
    s3_bucket: tuple[str, dict[str, Any]], proxy: FaultProxy, tmp_path: Any, name: str, payload: bytes, **options: Any
) -> workers.Job:
    digest = hashlib.sha256(payload).hexdigest()
    return workers.Job(
        cache_dir=str(tmp_path / "cache"),
        limit_bytes=16 * SIZE,
        url=s3_bucket[0],
        options=storage_options(proxy.endpoint_url),
        name=name,
        key=f"fp/{name}@{digest[:12]}",
        num_bytes=len(payload),
        digest=digest,
        chunk_bytes=PART,
        cache_options=options,
    )
