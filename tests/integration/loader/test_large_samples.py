"""Large samples (≥ 16 KB, decoded one by one from the block's offsets) through the loader:
with the default collation their bin values and arrays are read as views of the verified block
and copied once, into the batch (format/sample_views.py); a transform still sees ``bytes``.
Every payload must arrive exactly, for W=0 (raw blocks checked on the read-ahead thread) and
W=2, shuffled or not."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from shardkit.loader.transfer import recycler

NUM_SAMPLES = 96


def payload(i: int) -> bytes:
    return np.random.default_rng(i).bytes(16_000 + (i * 977) % 20_000)  # incompressible: raw blocks


@pytest.fixture(scope="module")
def large_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("large") / "ds")
    with sk.ShardWriter(root, shard_size="1MiB", block_size="200KiB") as writer:
        for i in range(NUM_SAMPLES):
            writer.write({"id": i, "jpg": payload(i), "label": i % 10,
                          "emb": np.full(3, i, dtype=np.float32),
                          "mask": payload(i)[:100] if i % 3 else None})  # bytes or None: a list
    return root


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("shuffle", [False, True])
def test_large_payloads_arrive_exactly(large_dataset: str, num_workers: int, shuffle: bool) -> None:
    ds = sk.StreamingDataset(large_dataset, batch_size=8, shuffle=shuffle, seed=3, shuffle_window=20)
    loader = sk.ShardLoader(ds, num_workers=num_workers, timeout=120 if num_workers else 0)
    seen: dict[int, str] = {}
    for _ in range(2):  # a second pass reuses ring slots and the read-ahead thread
        seen.clear()
        for batch in loader:
            jpg = batch["jpg"]
            assert isinstance(jpg, sk.Ragged) and jpg.kind == "bytes"
            for row, sample_id in enumerate(batch["id"].tolist()):
                assert sample_id not in seen
                seen[sample_id] = hashlib.sha256(jpg[row]).hexdigest()
                assert batch["label"][row] == sample_id % 10
                assert batch["emb"][row].tolist() == [sample_id] * 3
                mask = batch["mask"][row]  # a mixed field stays a list, of bytes (never views)
                assert mask == (payload(sample_id)[:100] if sample_id % 3 else None)
                assert type(mask) in (bytes, type(None))
    assert seen == {i: hashlib.sha256(payload(i)).hexdigest() for i in range(NUM_SAMPLES)}


def test_a_transform_sees_bytes_not_views(large_dataset: str) -> None:
    kinds: set[type] = set()

    def transform(sample: dict[str, Any]) -> dict[str, Any]:
        kinds.add(type(sample["jpg"]))
        return sample

    ds = sk.StreamingDataset(large_dataset, batch_size=8, shuffle=False, transform=transform)
    count = sum(len(batch["id"]) for batch in sk.ShardLoader(ds, num_workers=0))
    assert count == NUM_SAMPLES and kinds == {bytes}


def test_kept_batches_stay_intact_and_dropped_ones_are_recycled(large_dataset: str, monkeypatch) -> None:
    """W=0 collates into reused buffers (loader/transfer/recycler.py, X6): a batch the loop keeps is never
    written over by later ones, and a loop that drops its batches gets a few buffers back."""
    monkeypatch.setattr(recycler, "RECYCLE_BYTES", 64 << 10)  # these batches are ~200 KB
    loader = sk.ShardLoader(sk.StreamingDataset(large_dataset, batch_size=8, shuffle=False), num_workers=0)
    kept = list(loader)
    assert len({batch["jpg"].values.data_ptr() for batch in kept}) == len(kept)
    for batch in kept:
        for row, sample_id in enumerate(batch["id"].tolist()):
            assert batch["jpg"][row] == payload(sample_id)
    pointers = {batch["jpg"].values.data_ptr() for batch in loader}
    assert len(pointers) <= 3 < len(kept)
