"""A warm node cache is enough to train (specs/cache.md K47, K48), against the real moto S3
server behind the fault proxy: ``shardkit cache warm URL`` (a real subprocess, no cache
settings, ``HOME`` a temp folder) fills the default cache dir, a ``StreamingDataset(URL)``
without cache arguments reads from it, and with the store unreachable (the proxy stopped:
connections refused) a job trains a full epoch from it, saying so once — from a manifest entry
this user sealed, never from one others may have written unless the job opts in."""

from __future__ import annotations

import glob
import json
import logging
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from shardkit.errors import TransientStorageError
from tests.helpers.fault_proxy import FaultProxy
from tests.helpers.s3 import storage_options, write_s3_tokens

pytestmark = [pytest.mark.s3, pytest.mark.filterwarnings("ignore::UserWarning:torch.utils.data.dataloader")]

NUM_SAMPLES = 240
OFFLINE = "running OFFLINE from the node cache"


@pytest.fixture
def dataset(s3_bucket: tuple[str, dict[str, Any]]) -> tuple[str, sk.Manifest]:
    url, manifest = write_s3_tokens(s3_bucket, NUM_SAMPLES, lambda rng: rng.integers(0, 1 << 30, 16, dtype=np.int32),
                                    seed=7, shard_size="8KiB", block_size="2KiB")
    assert len(manifest.shards) >= 3
    return url, manifest


@pytest.fixture
def home(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """No cache settings at all: ``$SHARDKIT_CACHE_DIR`` unset, ``HOME`` a fresh folder."""
    monkeypatch.delenv("SHARDKIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("SHARDKIT_OFFLINE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return str(tmp_path / "home")


def warm(url: str, proxy: FaultProxy) -> None:
    """``shardkit cache warm URL`` in a subprocess, with only the store's options given."""
    options = storage_options(proxy.endpoint_url)
    argv = [sys.executable, "-c", "import sys; from shardkit.cli import main; sys.exit(main(sys.argv[1:]))",
            "cache", "warm", url, "--no-progress"]
    for key, value in options.items():
        argv += ["--storage-option", f"{key}={json.dumps(value)}"]
    done = subprocess.run(argv, env=dict(os.environ), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr


def ids_of_one_epoch(ds: sk.StreamingDataset, num_workers: int) -> list[int]:
    return sorted(int(i) for batch in sk.ShardLoader(ds, num_workers=num_workers) for i in batch["id"])


def manifest_entry(home: str) -> str:
    found = glob.glob(os.path.join(home, ".cache", "shardkit", "v1", "e-manifest-*.data"))
    assert len(found) == 1, found
    return found[0]


def test_warm_fills_the_cache_a_job_without_cache_arguments_reads_k47(
        dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy, home: str) -> None:
    url, manifest = dataset
    warm(url, fault_proxy)
    shard_gets = len(fault_proxy.records("GET", "/shards/"))
    options = storage_options(fault_proxy.endpoint_url)
    ds = sk.StreamingDataset(url, batch_size=8, shuffle=False, storage_options=options)
    assert ds.options.cache_dir == os.path.join(home, ".cache", "shardkit")
    assert ids_of_one_epoch(ds, 0) == list(range(NUM_SAMPLES))
    stats = ds._shard_cache().stats  # noqa: SLF001 - the job's own cache counters (G10)
    assert stats.hits >= len(manifest.shards) and stats.misses == 0
    assert len(fault_proxy.records("GET", "/shards/")) == shard_gets  # no shard read from the store


@pytest.mark.parametrize("num_workers", [0, 2])
def test_with_the_store_unreachable_a_warm_cache_trains_a_full_epoch_k48(
        dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy, home: str, num_workers: int,
        caplog: pytest.LogCaptureFixture) -> None:
    url, _ = dataset
    warm(url, fault_proxy)
    options = storage_options(fault_proxy.endpoint_url)
    fault_proxy.stop()  # the store is unreachable from here on: connections are refused
    with caplog.at_level(logging.WARNING, logger="shardkit"):
        ds = sk.StreamingDataset(url, batch_size=8, shuffle=True, seed=3, tail="pad",
                                 storage_options=options)
        seen = ids_of_one_epoch(ds, num_workers)
    assert sorted(set(seen)) == list(range(NUM_SAMPLES))
    offline = [r for r in caplog.records if OFFLINE in r.getMessage()]
    assert len(offline) == 1 and manifest_entry(home) in offline[0].getMessage()


def test_an_entry_others_may_write_is_not_used_offline_without_the_opt_in_k48(
        dataset: tuple[str, sk.Manifest], fault_proxy: FaultProxy, home: str) -> None:
    url, _ = dataset
    warm(url, fault_proxy)
    entry = manifest_entry(home)
    os.chmod(entry, 0o664)  # writable: not a sealed download of this user (K46)
    options = storage_options(fault_proxy.endpoint_url)
    fault_proxy.stop()
    with pytest.raises(TransientStorageError) as caught:
        sk.StreamingDataset(url, batch_size=8, storage_options=options)
    message = str(caught.value)
    assert entry in message and "trust-cache" in message and "SHARDKIT_OFFLINE" in message

    ds = sk.StreamingDataset(url, batch_size=8, shuffle=False, storage_options=options, offline="trust-cache")
    assert ids_of_one_epoch(ds, 0) == list(range(NUM_SAMPLES))
