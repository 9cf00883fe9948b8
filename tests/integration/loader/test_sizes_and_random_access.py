"""Sizes users expect and ``ds[i]`` by global index (R12 in specs/resume-state.md):
``ds.num_samples`` counts the dataset, ``len(ds)`` this rank's samples of an epoch, ``len(loader)``
its steps; ``ds[i]`` reads one sample through range reads, locally and from S3 (moto server,
through the byte-counting proxy tests/helpers/fault_proxy.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from tests.helpers.datasets import expected_sample
from tests.helpers.fault_proxy import FaultProxy
from tests.helpers.resume import TOO_MANY_WORKERS
from tests.helpers.s3 import storage_options

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)


def check_sample(got: dict[str, Any], sample_id: int) -> None:
    want = expected_sample(sample_id)
    assert got["id"] == sample_id and got["text"] == want["text"] and got["blob"] == want["blob"]
    assert np.array_equal(got["tokens"], want["tokens"]) and np.array_equal(got["pair"], want["pair"])


@pytest.mark.parametrize(("tail", "world_size", "steps"), [("pad", 1, 8), ("drop", 1, 7), ("pad", 2, 4),
                                                           ("drop", 2, 3)])
def test_sizes_count_samples_and_len_loader_counts_steps(small_dataset: str, tail: str, world_size: int,
                                                         steps: int) -> None:
    """23 samples, batch 3: per rank ``steps`` batches; len(ds) = steps × 3 on every rank."""
    for rank in range(world_size):
        ds = sk.StreamingDataset(small_dataset, batch_size=3, tail=tail, with_index=True)
        ds.options = dataclasses.replace(ds.options, rank=rank, world_size=world_size)
        loader = sk.ShardLoader(ds, num_workers=2 if rank == 0 else 0)
        assert ds.num_samples == 23
        assert len(ds) == steps * 3 and len(loader) == steps
        batches = list(loader)
        assert len(batches) == steps and sum(len(b["id"]) for b in batches) == len(ds)
        assert len(ds) == steps * 3  # the same in the next epoch


def test_getitem_by_global_index_matches_what_was_written(small_dataset: str) -> None:
    ds = sk.StreamingDataset(small_dataset, batch_size=3)
    for index in [5, 0, 22, 11, 4, 12, 11]:  # across shards (one empty), back and forth
        check_sample(ds[index], index)
    check_sample(ds[np.int64(7)], 7)
    check_sample(ds[-1], 22)
    with pytest.raises(IndexError, match=r"sample 23 out of range \[0, 23\)"):
        ds[23]
    with pytest.raises(IndexError):
        ds[-24]
    with pytest.raises(TypeError, match="must be an int"):
        ds[1.5]  # type: ignore[index]


def test_getitem_agrees_with_the_streamed_index(small_dataset: str) -> None:
    """``ds[i]`` is the sample a batch marks with ``_index = i`` (after a fork, in a worker too)."""
    ds = sk.StreamingDataset(small_dataset, batch_size=4, with_index=True)
    ds[3]  # a lookup opened in the parent; workers fork with it
    for batch in sk.ShardLoader(ds, num_workers=1):
        for row, index in enumerate(batch["_index"].tolist()):
            assert int(batch["id"][row]) == ds[index]["id"]


@pytest.mark.s3
def test_getitem_from_s3_reads_a_block_not_the_shard(s3_bucket: tuple[str, dict[str, Any]],
                                                     fault_proxy: FaultProxy) -> None:
    url = f"{s3_bucket[0]}/ra"
    rng = np.random.default_rng(3)
    payloads = [rng.bytes(1000) for _ in range(120)]  # incompressible: shards of ~64 KB
    with sk.ShardWriter(url, shard_size="64KiB", block_size="4KiB", storage_options=s3_bucket[1]) as writer:
        for i, payload in enumerate(payloads):
            writer.write({"id": i, "payload": payload})
    ds = sk.StreamingDataset(url, batch_size=8, storage_options=storage_options(fault_proxy.endpoint_url))
    manifest = ds.dataset.manifest
    first = manifest.shards[0]
    assert ds[3] == {"id": 3, "payload": payloads[3]}
    served = fault_proxy.bytes_served(first.name)
    assert 0 < served < first.num_bytes // 4, (served, first.num_bytes)
    for index in [119, 0, 64, 63, 1]:
        assert ds[index] == {"id": index, "payload": payloads[index]}
    assert ds.num_samples == 120
