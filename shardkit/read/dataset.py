"""Open a dataset: its manifest and readers for its shards, from a folder, URL or manifest path."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from shardkit.format import MANIFEST_NAME, Manifest
from shardkit.read.manifest_open import load_manifest
from shardkit.read.options import ReadOptions
from shardkit.read.shard_reader import ShardReader
from shardkit.read.sources import open_source
from shardkit.storage import ShardCache, Store, open_store


def split_manifest_path(path: str) -> str:
    """The dataset root for ``path`` (a folder, or a ``…/manifest.json``)."""
    stripped = path.rstrip("/")
    if stripped.endswith("/" + MANIFEST_NAME) or stripped == MANIFEST_NAME:
        return posixpath.dirname(stripped) or "."
    return stripped or path


@dataclass
class StoredDataset:
    """A dataset as stored: its store and validated manifest (what ``open_dataset`` returns).
    Not the torch-facing ``StreamingDataset`` (shardkit/loader), which streams batches of it."""

    store: Store
    manifest: Manifest
    pid: int = field(default_factory=os.getpid)

    def in_this_process(self) -> StoredDataset:
        """This dataset with a store usable here: after a fork (DataLoader workers) a fresh
        store, since async clients (s3fs) are not fork-safe; the manifest is reused."""
        if self.pid == os.getpid():
            return self
        return StoredDataset(open_store(self.store.url, self.store.storage_options, self.store.retry), self.manifest)

    @property
    def url(self) -> str:
        return self.store.url

    def open_shard(self, shard_index: int, read_ahead: bool = False) -> ShardReader:
        info = self.manifest.shards[shard_index]
        source = open_source(self.store, info.name, info.num_bytes)
        return ShardReader(source, info, options=ReadOptions(read_ahead=read_ahead))

    def samples(self) -> Iterator[dict[str, Any]]:
        """Every sample in manifest order."""
        for i in range(len(self.manifest.shards)):
            with self.open_shard(i) as reader:
                yield from reader


def open_dataset(path: str, storage_options: dict[str, Any] | None = None,
                 cache: ShardCache | None = None, offline: str = "sealed") -> StoredDataset:
    """Read and validate the manifest under ``path`` (folder, URL or manifest path); with the
    node ``cache``, a remote manifest is downloaded once per node and version (K18), and read
    from the cache when the store cannot be reached, as ``offline`` allows (K48)."""
    store = open_store(split_manifest_path(path), storage_options)
    return StoredDataset(store, load_manifest(store, cache, offline))
