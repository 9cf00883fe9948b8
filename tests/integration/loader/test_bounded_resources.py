"""Descriptors and memory stay bounded whatever the number of sources and shards
(specs/read-path.md RP1–RP3): a 1,000-source mixture reads a full epoch under ``ulimit -n 256``
at two workers; a consumer's shard descriptors stay within ``MAX_SHARD_DESCRIPTORS``; an epoch maps no
shard file; opening and planning 1,000 sources stays within a stated memory bound."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import shardkit as sk
from shardkit.read.open_shards import MAX_SHARD_DESCRIPTORS
from tests.helpers.many_sources import mixture_of, write_sources

ROOT = Path(__file__).resolve().parents[3]
PER_SOURCE = 16
MANY = 1_000
NOFILE = 256  # the limit of RP1's test: a quarter of the common default 1024
PLAN_PEAK_BYTES = 48 << 20  # RP3: open + plan + first batch of 1,000 sources (measured ~22 MiB)


@pytest.fixture(scope="module")
def many_sources(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("many"))
    write_sources(root, MANY, PER_SOURCE)
    return root


def _limit_descriptors() -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


@pytest.mark.slow
def test_a_1000_source_mixture_reads_an_epoch_under_ulimit_256_at_two_workers(many_sources: str) -> None:
    """RP1. Each source held two open shards before, so this job died near source 120 with
    ``OSError: [Errno 24] Too many open files``."""
    job = subprocess.run(
        [sys.executable, "-m", "tests.helpers.bounded_job", many_sources, str(MANY), str(PER_SOURCE), "2"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_limit_descriptors,
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads(job.stdout.strip().splitlines()[-1])
    assert result["nofile"] == NOFILE
    assert result["ids"] == list(range(MANY * PER_SOURCE))  # every sample exactly once
    assert result["most_descriptors"] < NOFILE


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_consumer_holds_at_most_max_shard_descriptors_whatever_the_number_of_sources(tmp_path: Path) -> None:
    """RP1 at ``num_workers=0``: 1.5 × MAX_SHARD_DESCRIPTORS sources (two open shards each would
    hold 3 × as many descriptors)."""
    num_sources = MAX_SHARD_DESCRIPTORS * 3 // 2
    paths = write_sources(str(tmp_path), num_sources, PER_SOURCE)
    loader = sk.ShardLoader(sk.StreamingDataset(mixture_of(paths, PER_SOURCE), batch_size=PER_SOURCE, seed=5),
                            num_workers=0)
    loader.set_epoch(0)
    before = _open_descriptors()
    most, ids = before, []
    for batch in loader:
        most = max(most, _open_descriptors())
        ids += batch["id"].tolist()
    assert sorted(ids) == list(range(num_sources * PER_SOURCE))
    assert most - before <= MAX_SHARD_DESCRIPTORS


def _mapped_files_under(root: str) -> set[str]:
    """Files under ``root`` this process has mapped now (/proc/self/maps)."""
    found = set()
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip().startswith(root):
                found.add(fields[5].strip())
    return found


def test_an_epoch_and_random_access_map_no_shard_file(tmp_path: Path) -> None:
    """RP2: 40 shards of incompressible bytes (raw blocks, the case that was read through
    views of a mapped file), a shuffled epoch at ``num_workers=0`` and random access: at no
    batch is any shard file mapped into the process."""
    root = str(tmp_path / "images")
    rng = np.random.default_rng(0)
    with sk.ShardWriter(root, shard_size="256KiB", block_size="64KiB") as writer:
        for i in range(480):
            writer.write({"id": i, "jpg": rng.integers(0, 256, 24_000, dtype=np.uint8).tobytes()})
    dataset = sk.StreamingDataset(root, batch_size=8, seed=1, shuffle_window=64)
    assert len(dataset.dataset.manifest.shards) == 40
    loader = sk.ShardLoader(dataset, num_workers=0)
    loader.set_epoch(0)
    seen, mapped = 0, set()
    for batch in loader:
        seen += len(batch["id"])
        mapped |= _mapped_files_under(root)
    for index in (0, 239, 479):
        assert dataset[index]["id"] == index
        mapped |= _mapped_files_under(root)
    assert seen == 480
    assert mapped == set()


@pytest.mark.slow
def test_opening_and_planning_1000_sources_stays_within_the_stated_memory(many_sources: str) -> None:
    """RP3: open 1,000 sources, plan the epoch and deliver its first batch: at most
    ``PLAN_PEAK_BYTES`` of Python allocations at the peak (torch imported before measuring)."""
    paths = write_sources(many_sources, MANY, PER_SOURCE)
    import shardkit.loader  # noqa: F401  (torch and the loader imported outside the measurement)

    tracemalloc.start()
    try:
        dataset = sk.StreamingDataset(mixture_of(paths, PER_SOURCE), batch_size=PER_SOURCE, seed=3)
        loader = sk.ShardLoader(dataset, num_workers=0)
        loader.set_epoch(0)
        first = next(iter(loader))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(first["id"]) == PER_SOURCE
    assert peak <= PLAN_PEAK_BYTES, f"peak {peak >> 20} MiB"
