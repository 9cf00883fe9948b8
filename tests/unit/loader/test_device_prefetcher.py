"""``DevicePrefetcher`` and ``to_device`` (pinned host → device overlap; G5 in docs/guarantees.md boundary kept).

The CUDA path (side stream, events, record_stream) runs only where a GPU is present."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import shardkit as sk


def _dataset(path: Path, n: int = 64) -> str:
    with sk.ShardWriter(str(path), shard_size="1KiB", block_size="256B") as writer:
        for i in range(n):
            writer.write({"id": i, "x": np.arange(i % 5 + 1, dtype=np.int64)})
    return str(path)


def _loader(url: str) -> sk.ShardLoader:
    return sk.ShardLoader(sk.StreamingDataset(url, batch_size=4, shuffle=False, with_index=True))


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_batches_arrive_unchanged_on_device(tmp_path: Path, device: str) -> None:
    url = _dataset(tmp_path / "ds")
    expected = [(b["id"].clone(), [t.clone() for t in b["x"]]) for b in _loader(url)]
    got = list(sk.DevicePrefetcher(_loader(url), device))
    assert len(got) == len(expected)
    for batch, (ids, xs) in zip(got, expected, strict=True):
        assert batch["id"].device.type == device
        assert isinstance(batch["x"], sk.Ragged) and batch["x"].values.device.type == device
        assert torch.equal(batch["id"].cpu(), ids)
        assert all(torch.equal(a.cpu(), b) for a, b in zip(batch["x"], xs, strict=True))


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_state_counts_only_batches_the_loop_received(tmp_path: Path, device: str) -> None:
    """G5: a batch staged on the device but not yet handed to the loop is not consumed."""
    url = _dataset(tmp_path / "ds")
    full = [i for b in _loader(url) for i in b["id"].tolist()]
    prefetcher = sk.DevicePrefetcher(_loader(url), device)
    batches = iter(prefetcher)
    head = [i for _ in range(3) for i in next(batches)["id"].cpu().tolist()]
    state = prefetcher.state_dict()
    restored = _loader(url)
    restored.load_state_dict(state)
    rest = [i for b in restored for i in b["id"].tolist()]
    assert head + rest == full


def test_loader_state_from_an_earlier_snapshot(tmp_path: Path) -> None:
    """``state_dict(snapshot)`` states the boundary at the snapshot, not the latest batch."""
    url = _dataset(tmp_path / "ds")
    loader = _loader(url)
    batches = iter(loader)
    next(batches)
    snapshot = loader.consumed_snapshot()
    next(batches)
    assert loader.state_dict(snapshot)["plan"]["offsets"] == [4]
    assert loader.state_dict()["plan"]["offsets"] == [8]
