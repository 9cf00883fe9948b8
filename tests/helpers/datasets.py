"""Small datasets with known contents and exactly chosen shard sizes, for loader and resume tests.

``write_dataset(root, shard_sizes)`` writes samples ``0 … N-1`` (manifest order) with
``shardkit.ShardWriter`` so that shard ``k`` holds exactly ``shard_sizes[k]`` samples, empty
shards included. Every field is a pure function of the sample id (``expected_sample``), so a
test can check what the loader delivered without keeping the data around.

How exact sizes come out of the writer: a shard is closed once its sealed blocks reach
``shard_size`` raw bytes (shardkit/write/writer.py). Ordinary samples are tiny; the last sample
of each shard but the final one carries a ``filler`` of ``FILLER`` bytes, which seals its block
and pushes the shard over ``shard_size`` right there. The writer never writes an empty shard, so
empty ones are built with the format's own shard builder and spliced into the manifest (a
``Manifest`` recomputes the fingerprint), as an external packer (Ray parts) may produce them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

import shardkit as sk
from shardkit.format import MANIFEST_NAME, Manifest, decode_manifest
from shardkit.format.shard_builder import build_shard

# Seed 000's 23 samples, in the shard sizes of the worked example (specs/partition.md).
SMALL_SIZES = (5, 0, 7, 3, 8)
# 1001 samples in 7 shards of very different sizes, one of them empty, one of a single sample.
UNEVEN_SIZES = (400, 1, 0, 257, 13, 300, 30)

FILLER = 64 << 10  # bytes; more than any shard's ordinary samples (~100 B each, <= 400 of them)
SHARD_SIZE = FILLER
BLOCK_SIZE = 512


def expected_sample(sample_id: int) -> dict[str, Any]:
    """The fields of sample ``sample_id`` (the filler excepted): every collation kind.

    ``id`` int → int64 tensor; ``tokens`` int32[id % 5] → ``Ragged`` (0-length included);
    ``pair`` float32[2] → stacked tensor; ``blob`` bytes → ``Ragged`` of kind bytes;
    ``text`` str → list[str].
    """
    return {
        "id": sample_id,
        "tokens": np.arange(sample_id, sample_id + sample_id % 5, dtype=np.int32),
        "pair": np.array([sample_id, -sample_id], dtype=np.float32),
        "blob": bytes([sample_id % 251]) * (sample_id % 4),
        "text": f"sample-{sample_id}",
    }


def write_ids(root: str, num_samples: int, row: Callable[[int], dict[str, Any]] | None = None,
              **writer_options: Any) -> str:
    """Samples ``{"id": i}`` (or ``row(i)``) for ``i`` in ``0 … num_samples-1``, written in order with
    ``ShardWriter(root, **writer_options)``; returns ``root``."""
    with sk.ShardWriter(root, **writer_options) as writer:
        for i in range(num_samples):
            writer.write({"id": i} if row is None else row(i))
    return root


def write_dataset(root: str, shard_sizes: Sequence[int]) -> str:
    """Write samples ``0 … sum(shard_sizes)-1`` into ``root`` in shards of exactly those sizes."""
    real_sizes = [size for size in shard_sizes if size > 0]
    closing = set(np.cumsum(real_sizes)[:-1].tolist()) if real_sizes else set()
    sample_id = 0
    with sk.ShardWriter(root, shard_size=SHARD_SIZE, block_size=BLOCK_SIZE, level=1) as writer:
        for size in real_sizes:
            for _ in range(size):
                sample = expected_sample(sample_id)
                sample_id += 1
                sample["filler"] = b"\0" * FILLER if sample_id in closing else b""
                writer.write(sample)
    _splice_empty_shards(root, shard_sizes)
    manifest = _read_manifest(root)
    if manifest.shard_sizes != list(shard_sizes):
        raise RuntimeError(f"wrote shard sizes {manifest.shard_sizes}, wanted {list(shard_sizes)}")
    return root


def _read_manifest(root: str) -> Manifest:
    with open(os.path.join(root, MANIFEST_NAME), "rb") as fh:
        return decode_manifest(fh.read())


def _splice_empty_shards(root: str, shard_sizes: Sequence[int]) -> None:
    if all(size > 0 for size in shard_sizes):
        return
    manifest = _read_manifest(root)
    written = iter(manifest.shards)
    shards = []
    for position, size in enumerate(shard_sizes):
        if size > 0:
            shards.append(next(written))
            continue
        name = f"shards/empty-{position:06d}.sks"
        data, info = build_shard(name, [])
        with open(os.path.join(root, name), "wb") as fh:
            fh.write(data)
        shards.append(info)
    spliced = replace(manifest, shards=tuple(shards), fingerprint="")
    with open(os.path.join(root, MANIFEST_NAME), "wb") as fh:
        fh.write(spliced.to_json())


def check_delivered_sample(batch: dict[str, Any], row: int) -> int:
    """Assert row ``row`` of a loader batch equals what was written; return its sample id.

    Covers every collation kind of ``shardkit.loader.collate`` (target T1 in benchmarks/README.md:
    ragged and bytes fields arrive as ``shardkit.Ragged``).
    """
    sample_id = int(batch["id"][row])
    want = expected_sample(sample_id)
    tokens = batch["tokens"]  # Ragged, or one stacked tensor when the batch's lengths agree
    assert isinstance(tokens, sk.Ragged | torch.Tensor), type(tokens)
    if isinstance(tokens, sk.Ragged):
        assert tokens.kind == "array"
    assert tokens[row].dtype == torch.int32
    assert tokens[row].numpy().tolist() == want["tokens"].tolist(), sample_id
    assert batch["pair"][row].numpy().tolist() == want["pair"].tolist(), sample_id
    assert isinstance(batch["blob"], sk.Ragged) and batch["blob"].kind == "bytes"
    assert batch["blob"][row] == want["blob"], sample_id
    assert batch["text"][row] == want["text"], sample_id
    if "_index" in batch:
        assert int(batch["_index"][row]) == sample_id  # manifest-order index == id here
    return sample_id


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """23 samples in shards [5, 0, 7, 3, 8] (specs/partition.md worked example)."""
    return write_dataset(str(tmp_path_factory.mktemp("small") / "ds"), SMALL_SIZES)


@pytest.fixture(scope="session")
def uneven_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """1001 samples in 7 shards [400, 1, 0, 257, 13, 300, 30]."""
    return write_dataset(str(tmp_path_factory.mktemp("uneven") / "ds"), UNEVEN_SIZES)
