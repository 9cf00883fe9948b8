"""P16, P17 from the loader: a dataset smaller than a batch raises at construction; an epoch
that only this topology empties, or a large dropped share, is logged once by the trainer."""

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
def test_a_ranks_share_below_a_batch_is_logged_once_by_the_trainer(ten, caplog, num_workers):
    """Four ranks of batch 4 need 16 samples per step: the training process says so once, with
    ranks and workers, and the epoch yields nothing (P16)."""
    ds = sk.StreamingDataset(ten, batch_size=4)
    ds.options = dataclasses.replace(ds.options, rank=1, world_size=4)
    loader = sk.ShardLoader(ds, num_workers=num_workers)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        assert len(loader) == 0 and list(loader) == [] and list(loader) == []
    messages = [r.getMessage() for r in caplog.records if r.name == "shardkit.loader"]
    assert len(messages) == 1 and messages[0].startswith(
        f"the epoch yields no batch (10 samples, 4 rank(s) x {max(num_workers, 1)} worker(s), batch_size 4")


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
