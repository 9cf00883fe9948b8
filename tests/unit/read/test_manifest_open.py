"""Opening a remote manifest through the node cache (specs/cache.md K18, manifest.md M14),
on a ``memory://`` store: cached by version, a republish seen at the next open, and a cache
that cannot hold the manifest is no reason to fail."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from shardkit.read import open_dataset
from shardkit.storage import ShardCache, open_store
from tests.helpers.files import packed_in_memory


def _remote_copy(tmp_path: Path, count: int) -> str:
    """A dataset packed locally, then copied object by object into a fresh memory:// store."""
    return packed_in_memory(tmp_path / f"ds-{count}", count, "1KiB", 20)


def _cached_manifests(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("v1/e-manifest-*.data"))


def test_manifest_is_cached_by_version_and_a_republish_is_seen(tmp_path: Path) -> None:
    """K18: the first open stores the manifest under its version; later opens read that entry;
    after a republish (new version) the next open fetches the new manifest."""
    url = _remote_copy(tmp_path, 50)
    cache = ShardCache(str(tmp_path / "cache"), 1 << 30)
    first = open_dataset(url, cache=cache).manifest
    entries = _cached_manifests(tmp_path / "cache")
    assert len(entries) == 1 and first.num_samples == 50
    assert open_dataset(url, cache=ShardCache(str(tmp_path / "cache"), 1 << 30)).manifest == first
    assert _cached_manifests(tmp_path / "cache") == entries
    other = open_store(_remote_copy(tmp_path, 30))
    open_store(url).write_atomic("manifest.json", other.read("manifest.json"))  # republished
    assert open_dataset(url, cache=cache).manifest.num_samples == 30
    assert len(_cached_manifests(tmp_path / "cache")) == 2


def test_a_cache_too_small_for_the_manifest_reads_it_from_the_store(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """K7 refuses an entry larger than the limit; the open still succeeds, logging why."""
    url = _remote_copy(tmp_path, 50)
    with caplog.at_level(logging.WARNING):
        dataset = open_dataset(url, cache=ShardCache(str(tmp_path / "cache"), 16))
    assert dataset.manifest.num_samples == 50 and "not kept in the node cache" in caplog.text
    assert _cached_manifests(tmp_path / "cache") == []


def test_a_cached_copy_nobody_vouches_for_is_not_used_k44(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """K44 where the store's version is no MD5 (memory://: a time): a cached copy that is not a
    sealed download of this user (here: a writable file put in its place) is not believed; the
    manifest is read from the store, naming the file."""
    url = _remote_copy(tmp_path, 50)
    cache = ShardCache(str(tmp_path / "cache"), 1 << 30)
    genuine = open_dataset(url, cache=cache).manifest
    [entry] = _cached_manifests(tmp_path / "cache")
    forged = open_store(_remote_copy(tmp_path, 30)).read("manifest.json")
    assert len(forged) <= entry.stat().st_size
    entry.unlink()
    entry.write_bytes(forged + b" " * (len(genuine.to_json()) - len(forged)))
    entry.chmod(0o664)
    with caplog.at_level(logging.WARNING):
        opened = open_dataset(url, cache=cache).manifest
    assert opened == genuine and "is not known to hold the store's bytes" in caplog.text
    assert str(entry) in caplog.text
