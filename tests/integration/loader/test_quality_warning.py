"""P20 through the loader: a dataset packed in source order that declares a label field is
warned about once, in the training process, only when its batches draw from few shards (or,
with ``quality_field``, hold few distinct values of that field)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import shardkit as sk
from shardkit.plan.quality import label_quality, quality_advice
from shardkit.read.field_values import QualityFieldError, read_label_codes


def sorted_dataset(path: Path, tag: int) -> str:
    """2,000 samples in 20 sorted classes, ~50 samples per shard, recorded as source order."""
    with sk.ShardWriter(str(path), shard_size="4KiB", block_size="1KiB") as writer:
        writer.order = {"shuffled": False}
        for index in range(2000):
            writer.write({"label": index // 100, "tag": tag, "payload": bytes(40)})
    return str(path)


def test_loader_warns_once_when_batches_draw_from_few_shards(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="shardkit.plan.quality")
    narrow = sk.StreamingDataset(sorted_dataset(tmp_path / "a", 0), batch_size=64, shuffle_window=64)
    assert len(narrow.dataset.manifest.shards) > 20
    for epoch in range(3):  # a new plan each epoch, one warning
        narrow.plan(epoch, 1, 0)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "--quality label" in messages[0] and "shards on average" in messages[0]
    wide = sk.StreamingDataset(sorted_dataset(tmp_path / "b", 1), batch_size=64, shuffle_window=2048)
    wide.plan(0, 1, 0)  # every window mixes the whole dataset: nothing to say
    assert len(caplog.records) == 1


def test_the_loader_spreads_only_datasets_not_shuffled_at_pack_time(tmp_path: Path) -> None:
    """P19: source order → spread 12; a recorded pack-time shuffle → 1; an explicit value wins."""
    source_order = sorted_dataset(tmp_path / "a", 0)
    with sk.ShardWriter(str(tmp_path / "b"), shard_size="4KiB", block_size="1KiB") as writer:
        writer.order = {"shuffled": True, "seed": 0}
        for index in range(200):
            writer.write({"label": index, "payload": bytes(40)})
    assert sk.StreamingDataset(source_order, batch_size=8).params.spread == 12
    assert sk.StreamingDataset(str(tmp_path / "b"), batch_size=8).params.spread == 1
    assert sk.StreamingDataset(str(tmp_path / "b"), batch_size=8, spread=5).params.spread == 5


def shuffled_dataset(path: Path) -> str:
    """The samples of ``sorted_dataset`` in a shuffled order, recorded as a pack-time shuffle."""
    order = np.random.default_rng(0).permutation(2000)
    with sk.ShardWriter(str(path), shard_size="4KiB", block_size="1KiB") as writer:
        writer.order = {"shuffled": True, "seed": 0}
        for index in order.tolist():
            writer.write({"label": index // 100, "tag": 2, "payload": bytes(40)})
    return str(path)


def test_a_quality_field_warns_once_from_its_values_when_batches_hold_few_labels(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """P20 opt-in: ``quality_field="label"`` measures the field as ``shardkit plan --quality``
    does (the same numbers and advice) and logs once; a pack-shuffled dataset is not warned."""
    caplog.set_level(logging.WARNING, logger="shardkit.plan.quality")
    path = sorted_dataset(tmp_path / "a", 3)
    sorted_ds = sk.StreamingDataset(path, batch_size=64, shuffle_window=64, quality_field="label")
    for epoch in range(3):
        sorted_ds.plan(epoch, 1, 0)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1, messages
    labels = read_label_codes(sorted_ds.dataset, "label")
    expected = quality_advice(label_quality(sorted_ds.plan(0, 1, 0), labels, "label"))
    assert messages[0] == expected and "distinct 'label' values" in messages[0] and "shardkit pack" in messages[0]
    mixed = sk.StreamingDataset(shuffled_dataset(tmp_path / "b"), batch_size=64, quality_field="label")
    mixed.plan(0, 1, 0)
    assert len(caplog.records) == 1


def test_a_quality_field_the_schema_lacks_is_named(tmp_path: Path) -> None:
    ds = sk.StreamingDataset(sorted_dataset(tmp_path / "a", 4), batch_size=64, quality_field="colour")
    with pytest.raises(QualityFieldError, match="no field 'colour'"):
        ds.plan(0, 1, 0)
