"""``shardkit cache warm`` reports what the cache really holds (exit 1 when not every shard),
and a ``StreamingDataset`` made without cache arguments uses ``$SHARDKIT_CACHE_DIR`` and
``$SHARDKIT_CACHE_LIMIT`` (specs/cache.md K16), so a warmed cache helps it with no code change."""

from __future__ import annotations

import os
import uuid

import pytest

import shardkit as sk
from shardkit.cli import main
from shardkit.loader.env import cache_settings, default_cache_dir

NUM_SAMPLES = 300


@pytest.fixture
def remote_dataset() -> tuple[str, sk.Manifest]:
    url = f"memory://warm-{uuid.uuid4().hex}"
    with sk.ShardWriter(url, shard_size="4KiB", block_size="1KiB") as writer:
        for index in range(NUM_SAMPLES):
            writer.write({"id": index, "text": f"sample {index} " * 4})
        manifest = writer.close()
    assert len(manifest.shards) >= 4
    return url, manifest


def cached_keys(cache_dir: str) -> set[str]:
    root = os.path.join(cache_dir, "v1")
    return {f[: -len(".data")] for f in os.listdir(root) if f.endswith(".data")}


def test_warm_below_the_dataset_size_reports_what_is_cached_and_fails(
        remote_dataset: tuple[str, sk.Manifest], tmp_path, capsys) -> None:
    url, manifest = remote_dataset
    sizes = [s.num_bytes for s in manifest.shards]
    limit = sum(sizes[:2]) + sizes[2] // 2  # room for the first two shards only
    cache_dir = str(tmp_path / "cache")
    code = main(["cache", "warm", url, "--cache-dir", cache_dir, "--cache-limit", str(limit),
                 "--no-progress"])
    captured = capsys.readouterr()
    assert code == 1, captured
    held = {k for k in cached_keys(cache_dir) if not k.startswith("e-manifest-")}  # warm caches it too (K47)
    assert len(held) == 2
    assert f"warmed 2 of {len(sizes)} shards" in captured.out
    assert "error: the cache holds 2 of" in captured.err and "--cache-limit" in captured.err


def test_warm_with_room_for_everything_succeeds(remote_dataset: tuple[str, sk.Manifest], tmp_path,
                                               capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    url, manifest = remote_dataset
    monkeypatch.setenv("SHARDKIT_CACHE_LIMIT", "10MiB")
    assert main(["cache", "warm", url, "--cache-dir", str(tmp_path), "--no-progress"]) == 0
    assert f"warmed {len(manifest.shards)} shards" in capsys.readouterr().out
    monkeypatch.setenv("SHARDKIT_CACHE_LIMIT", str(manifest.num_bytes - 1))  # the default of --cache-limit
    assert main(["cache", "warm", url, "--cache-dir", str(tmp_path / "small"), "--no-progress"]) == 1


def test_a_job_without_cache_arguments_reads_the_warmed_cache_k16(
        remote_dataset: tuple[str, sk.Manifest], tmp_path, capsys,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, manifest = remote_dataset
    cache_dir = str(tmp_path / "node-cache")
    monkeypatch.setenv("SHARDKIT_CACHE_DIR", cache_dir)
    monkeypatch.setenv("SHARDKIT_CACHE_LIMIT", "3MiB")
    assert main(["cache", "warm", url, "--no-progress"]) == 0
    capsys.readouterr()

    ds = sk.StreamingDataset(url, batch_size=10, shuffle=False)
    assert (ds.options.cache_dir, ds.options.cache_limit) == (cache_dir, 3 << 20)
    ids = [int(i) for batch in sk.ShardLoader(ds, num_workers=0) for i in batch["id"]]
    assert sorted(ids) == list(range(NUM_SAMPLES))
    stats = ds._shard_cache().stats  # noqa: SLF001 - the job's own cache counters
    assert stats is not None and stats.misses == 0 and stats.hits >= len(manifest.shards)
    keys = cached_keys(cache_dir)
    manifests = {k for k in keys if k.startswith("e-manifest-")}  # the job's manifest, cached too (K18)
    assert len(manifests) == 1 and len(keys - manifests) == len(manifest.shards)


def test_explicit_arguments_win_and_bad_values_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"SHARDKIT_CACHE_DIR": "/env/cache", "SHARDKIT_CACHE_LIMIT": "5GiB"}
    assert cache_settings(None, None, env) == ("/env/cache", 5 << 30)
    assert cache_settings("/mine", "1GiB", env) == ("/mine", 1 << 30)
    assert cache_settings(None, None, {}) == (default_cache_dir(), 200 << 30)  # K47: warm's default
    assert cache_settings(None, None, {}, remote=False) == (None, 200 << 30)  # K8: local is never cached
    assert cache_settings(False, None, env)[0] is None  # the opt-out in code
    assert cache_settings(None, None, {"SHARDKIT_CACHE_DIR": "off"})[0] is None  # ... and in the environment
    with pytest.raises(ValueError, match=r"\$SHARDKIT_CACHE_LIMIT='lots'"):
        cache_settings(None, None, {"SHARDKIT_CACHE_LIMIT": "lots"})
