"""K2 and K45 together (specs/cache.md): a shard this process downloads into the node cache is
hashed whole once — the download's own check — not once more when the consumer opens the entry,
and not again by its reader, whatever epochs follow in the process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import shardkit as sk
import shardkit.read.sources as sources
from tests.helpers.files import packed_in_memory


def _remote_dataset(tmp_path: Path, count: int) -> tuple[str, int]:
    """A dataset of several shards packed locally and copied into a fresh memory:// store; its
    URL and number of shards."""
    local = tmp_path / "ds"
    url = packed_in_memory(local, count, "4KiB", 50)
    return url, len(json.loads((local / "manifest.json").read_text())["shards"])


def test_a_downloaded_shard_is_hashed_once_in_the_process_that_fetched_it_k2_k45(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, num_shards = _remote_dataset(tmp_path, 600)
    assert num_shards >= 5
    hashed: list[str] = []
    real = sources._hash_and_index

    def counted(source: Any, info: Any) -> Any:
        hashed.append(info.name)
        return real(source, info)

    monkeypatch.setattr(sources, "_hash_and_index", counted)
    dataset = sk.StreamingDataset(url, batch_size=16, cache_dir=str(tmp_path / "cache"), tail="pad")
    loader = sk.ShardLoader(dataset, num_workers=0)
    for epoch in range(2):
        loader.set_epoch(epoch)
        seen = {int(i) for batch in loader for i in batch["id"].tolist()}
        assert seen == set(range(600))
    assert len(hashed) == num_shards and set(hashed) == {f"shards/shard-{i:06d}.sks" for i in range(num_shards)}
