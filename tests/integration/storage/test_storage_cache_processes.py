"""The cache shared by real processes, over moto S3 through the fault proxy (specs/cache.md)."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import signal
import time
from dataclasses import replace

import pytest

from shardkit.errors import CacheError
from shardkit.storage import CacheOptions, ShardCache, open_store
from shardkit.storage.cache_layout import entry_name
from tests.helpers.fault_proxy import Fault, FaultProxy
from tests.helpers.s3 import storage_options
from tests.integration.storage import storage_workers as workers

pytestmark = [
    pytest.mark.s3,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning:botocore"),
]

CTX = multiprocessing.get_context("spawn")
SIZE = 2 * 1024 * 1024
NUM_SHARDS = 6
HANG = 120  # generous "did not hang" bound, seconds


@pytest.fixture
def jobs(s3_bucket: tuple[str, dict], fault_proxy: FaultProxy,
         tmp_path: object) -> list[workers.Job]:
    """One job per shard: objects written directly to moto, read through the proxy."""
    url, options = s3_bucket
    direct = open_store(url, options)
    result = []
    for index in range(NUM_SHARDS):
        data = os.urandom(SIZE)
        direct.write_atomic(f"ds/{index}.shard", data)
        result.append(workers.Job(
            cache_dir=os.path.join(str(tmp_path), "cache"), limit_bytes=NUM_SHARDS * SIZE,
            url=url, options=storage_options(fault_proxy.endpoint_url), name=f"ds/{index}.shard",
            key=f"fp123/ds/{index}.shard@{hashlib.sha256(data).hexdigest()[:16]}",
            num_bytes=SIZE, digest=hashlib.sha256(data).hexdigest(),
            cache_options={"hedge_after": None}))  # bytes are counted exactly: no hedges (K22)
    return result


def cache_for(job: workers.Job, **overrides: float) -> ShardCache:
    options = CacheOptions(chunk_bytes=job.chunk_bytes, poll_interval=0.02, **{**job.cache_options, **overrides})
    return ShardCache(job.cache_dir, job.limit_bytes, options)


def open_in_parent(job: workers.Job, cache: ShardCache | None = None):  # noqa: ANN201
    cache = cache or cache_for(job)
    return cache.open(open_store(job.url, job.options), job.name, key=job.key,
                      num_bytes=job.num_bytes, verify=workers.verifier(job.digest))


def disk_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for f in os.listdir(root)
               if f.endswith(".data") or ".tmp-" in f)


def test_processes_opening_one_shard_download_it_once_c3(jobs: list[workers.Job],
                                                         fault_proxy: FaultProxy) -> None:
    job = jobs[0]
    assert workers.open_all_at_once([job] * 4, HANG) == ["ok"] * 4
    assert fault_proxy.bytes_served(job.name) == SIZE  # exactly one full download


def test_eviction_stays_within_limit_and_spares_leases_c5_c6(jobs: list[workers.Job]) -> None:
    limit = 3 * SIZE
    jobs = [replace(job, limit_bytes=limit) for job in jobs]
    ready, release = CTX.Event(), CTX.Event()
    holder = CTX.Process(target=workers.hold_lease, args=(jobs[0], ready, release))
    holder.start()
    try:
        assert ready.wait(timeout=HANG)
        cache = cache_for(jobs[0])
        held = os.path.join(cache.root, entry_name(jobs[0].key) + ".data")
        for job in jobs[1:]:
            with open_in_parent(job, cache):
                assert os.path.exists(held)  # never evicted while the other process leases it
                assert disk_bytes(cache.root) <= limit
    finally:
        release.set()
        holder.join(timeout=HANG)
    for job in jobs[3:]:  # the lease is gone: the LRU entry (jobs[0]) may now go
        with open_in_parent(job, cache):
            assert disk_bytes(cache.root) <= limit
    assert not os.path.exists(held)


def test_sigkill_mid_download_leaves_no_stale_lock_or_partial_file_c4(
        jobs: list[workers.Job], fault_proxy: FaultProxy) -> None:
    job = jobs[1]
    fault_proxy.add(Fault("slow", rate=1.0, key=job.name, delay=0.5))
    child = CTX.Process(target=workers.open_only, args=(job,))
    child.start()
    cache = cache_for(job, lock_timeout=HANG)
    deadline = time.monotonic() + HANG
    while not (os.path.isdir(cache.root) and any(".tmp-" in f for f in os.listdir(cache.root))
               and fault_proxy.records(key=job.name)):
        assert time.monotonic() < deadline and child.is_alive()
        time.sleep(0.05)
    with open(os.path.join(cache.root, entry_name(job.key) + ".lock")) as fh:
        assert fh.read().strip() == str(child.pid)  # the holder pid, for diagnostics
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=HANG)
    fault_proxy.clear_faults()
    started = time.monotonic()
    with open_in_parent(job, cache) as path:
        workers.verifier(job.digest)(path)
    assert time.monotonic() - started < HANG
    assert not [f for f in os.listdir(cache.root) if ".tmp-" in f]


def test_waiting_for_another_process_logs_the_holder_pid_c9(
        jobs: list[workers.Job], fault_proxy: FaultProxy, caplog: pytest.LogCaptureFixture) -> None:
    job = jobs[2]
    fault_proxy.add(Fault("slow", rate=1.0, key=job.name, delay=0.05))
    child = CTX.Process(target=workers.open_only, args=(job,))
    child.start()
    cache = cache_for(job, warn_after=0.2, lock_timeout=HANG)
    deadline = time.monotonic() + HANG
    while not fault_proxy.records(key=job.name):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with caplog.at_level(logging.WARNING, logger="shardkit.storage"):
        with open_in_parent(job, cache) as path:
            workers.verifier(job.digest)(path)
    child.join(timeout=HANG)
    assert child.exitcode == 0
    assert any(str(child.pid) in r.getMessage() and "waiting" in r.getMessage()
               for r in caplog.records)
    assert fault_proxy.bytes_served(job.name) == SIZE


def test_full_disk_is_a_clear_error_and_leaves_nothing(jobs: list[workers.Job]) -> None:
    results = CTX.Queue()
    child = CTX.Process(target=workers.open_with_file_size_limit,
                        args=(jobs[3], SIZE // 2, results))
    child.start()
    outcome = results.get(timeout=HANG)
    child.join(timeout=HANG)
    assert outcome.startswith("CacheError") and "disk full or file size limit" in outcome
    root = cache_for(jobs[3]).root
    assert not [f for f in os.listdir(root) if ".tmp-" in f or f.endswith(".data")]


def test_transient_faults_during_cache_downloads(jobs: list[workers.Job],
                                                 fault_proxy: FaultProxy) -> None:
    fault_proxy.add(Fault("status", rate=0.2, status=503))
    fault_proxy.add(Fault("reset", rate=0.1))
    fault_proxy.add(Fault("truncate", rate=0.1))
    cache = cache_for(jobs[0])
    for job in jobs[:3]:
        with open_in_parent(job, cache) as path:
            workers.verifier(job.digest)(path)


def test_tampered_object_fails_verification_clearly(jobs: list[workers.Job],
                                                    s3_bucket: tuple[str, dict],
                                                    fault_proxy: FaultProxy) -> None:
    job = jobs[4]
    open_store(*s3_bucket).write_atomic(job.name, b"\0" * SIZE)
    cache = cache_for(job)
    with pytest.raises(ValueError, match="sha256") as info:
        with open_in_parent(job, cache):
            pass
    assert any(job.name in note for note in info.value.__notes__)
    assert fault_proxy.bytes_served(job.name) == 3 * SIZE  # CacheOptions.verify_attempts
    assert not [f for f in os.listdir(cache.root) if ".tmp-" in f or f.endswith(".data")]


def test_no_room_error_names_dir_and_sizes(jobs: list[workers.Job]) -> None:
    cache = cache_for(replace(jobs[0], limit_bytes=SIZE + SIZE // 2), space_timeout=0.3)
    with open_in_parent(jobs[0], cache):
        with pytest.raises(CacheError) as info:
            with open_in_parent(jobs[1], cache):
                pass
    assert cache.root in str(info.value) and str(SIZE) in str(info.value)
