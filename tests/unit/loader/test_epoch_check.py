"""P13, P14 from the loader: an epoch with no batch raises where the user can see why; a large
dropped share is logged once by the training process."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import shardkit as sk
from shardkit.errors import PlanError


@pytest.fixture(scope="module")
def ten(tmp_path_factory) -> str:
    """Ten samples in two shards."""
    folder = str(tmp_path_factory.mktemp("ten") / "ds")
    with sk.ShardWriter(folder, shard_size=40, block_size=20) as writer:
        for i in range(10):
            writer.write({"id": i})
    return folder


def test_fewer_samples_than_a_batch_raises_at_construction(ten):
    with pytest.raises(PlanError, match=r"the epoch yields no batch \(10 samples, 1 rank\(s\).*batch_size 16, "
                                        r"tail='drop'\).*tail='pad'.*batch_size <= 10"):
        sk.StreamingDataset(ten, batch_size=16)


def test_pad_fills_the_one_batch_instead(ten):
    batches = list(sk.ShardLoader(sk.StreamingDataset(ten, batch_size=16, tail="pad", shuffle=False), num_workers=0))
    assert len(batches) == 1 and batches[0]["id"].tolist()[:10] == list(range(10))
    assert int(batches[0]["_padded"].sum()) == 6


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_ranks_share_below_a_batch_raises_before_any_worker_starts(ten, num_workers):
    """Four ranks of batch 4 need 16 samples per step: the plan for that topology raises at
    ``len`` and ``iter`` in the training process, naming ranks and workers."""
    ds = sk.StreamingDataset(ten, batch_size=4)
    ds.options = dataclasses.replace(ds.options, rank=1, world_size=4)
    loader = sk.ShardLoader(ds, num_workers=num_workers)
    message = rf"10 samples, 4 rank\(s\) x {max(num_workers, 1)} worker\(s\), batch_size 4"
    with pytest.raises(PlanError, match=message):
        len(loader)
    with pytest.raises(PlanError, match=message):
        iter(loader)


def test_a_large_drop_is_logged_once(ten, caplog):
    """Batch 4 of 10 samples drops 2 (20%) every epoch: one warning for the whole run."""
    loader = sk.ShardLoader(sk.StreamingDataset(ten, batch_size=4, seed=7), num_workers=0)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        for epoch in range(3):
            loader.set_epoch(epoch)
            assert len(list(loader)) == 2
    warnings = [r.getMessage() for r in caplog.records if "drops" in r.getMessage()]
    assert warnings == ["tail='drop' drops 2 of 10 samples (20%) every epoch (10 samples, 1 rank(s) x 1 worker(s), "
                        "batch_size 4, tail='drop', 2 step(s) per rank); use tail='pad' or a smaller batch_size"]
