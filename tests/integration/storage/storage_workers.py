"""Process entry points for the multi-process cache tests (importable by spawned children)."""

from __future__ import annotations

import hashlib
import multiprocessing
import resource
import signal
import traceback
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from typing import Any

from shardkit.storage import CacheOptions, ShardCache, open_store


@dataclass(frozen=True)
class Job:
    """Everything a child needs to open one shard through its own cache object."""

    cache_dir: str
    limit_bytes: int
    url: str
    options: dict[str, Any]
    name: str
    key: str
    num_bytes: int
    digest: str  # sha256 hex of the expected bytes: the verify callback
    chunk_bytes: int = 1 << 20
    cache_options: dict[str, Any] = field(default_factory=dict)  # more CacheOptions fields


def verifier(digest: str):  # noqa: ANN201 - a verify callback
    def verify(path: str) -> None:
        with open(path, "rb") as fh:
            got = hashlib.sha256(fh.read()).hexdigest()
        if got != digest:
            raise ValueError(f"{path}: sha256 {got}, expected {digest}")
    return verify


def _open(job: Job, **option_overrides: Any):  # noqa: ANN202
    options = CacheOptions(chunk_bytes=job.chunk_bytes, poll_interval=0.02,
                           **{**job.cache_options, **option_overrides})
    cache = ShardCache(job.cache_dir, job.limit_bytes, options)
    store = open_store(job.url, job.options)
    return cache.open(store, job.name, key=job.key, num_bytes=job.num_bytes,
                      verify=verifier(job.digest))


def open_and_check(job: Job, barrier: Barrier, results: Queue) -> None:
    """Wait for the others, open the shard, report whether its bytes are right."""
    try:
        barrier.wait(timeout=60)
        with _open(job) as path:
            verifier(job.digest)(path)
        results.put("ok")
    except BaseException:
        results.put(traceback.format_exc())


def open_all_at_once(jobs: list[Job], timeout: float) -> list[str]:
    """In one spawned process per job, open them all at once; each one's outcome ("ok" or a
    traceback)."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(jobs)), ctx.Queue()
    procs = [ctx.Process(target=open_and_check, args=(job, barrier, results)) for job in jobs]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=timeout) for _ in procs]
    for proc in procs:
        proc.join(timeout=timeout)
    return outcomes


def hold_lease(job: Job, ready: Event, release: Event) -> None:
    """Open the shard and keep the lease until ``release`` is set (or 120 s pass)."""
    with _open(job):
        ready.set()
        release.wait(timeout=120)


def open_only(job: Job) -> None:
    """Open the shard (the test SIGKILLs this process while it downloads)."""
    with _open(job):
        pass


def open_with_file_size_limit(job: Job, max_file_bytes: int, results: Queue) -> None:
    """Open the shard with RLIMIT_FSIZE below its size: the cache must say "disk full"."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    try:
        with _open(job):
            results.put("opened")
    except BaseException as exc:
        results.put(f"{type(exc).__name__}: {exc}")
