"""Determinism (W1): the same samples give byte-identical shards, manifest and fingerprint."""

from __future__ import annotations

import os

import numpy as np
import pytest

import shardkit as sk
from shardkit.read import open_dataset
from tests.helpers.files import read_tree


def _samples():
    rng = np.random.default_rng(7)
    for i in range(400):
        yield {
            "id": i,
            "tokens": rng.integers(0, 50_000, size=int(rng.integers(1, 200)), dtype=np.int32),
            "jpg": rng.bytes(int(rng.integers(10, 600))),  # incompressible
            "text": "lorem ipsum " * (i % 9),
            "score": np.float32(i / 7),
        }


def _write(folder: str, **kw) -> None:
    with sk.ShardWriter(
        folder, shard_size="64KiB", block_size="8KiB", metadata={"k": 1}, **kw
    ) as w:
        for sample in _samples():
            w.write(sample)




@pytest.mark.parametrize("compression", ["auto", "zstd", "none"])
def test_same_samples_same_bytes(tmp_path, compression):
    _write(str(tmp_path / "a"), compression=compression)
    _write(str(tmp_path / "b"), compression=compression)
    a, b = read_tree(tmp_path / "a"), read_tree(tmp_path / "b")
    assert len(a) > 3 and a == b
    fa, fb = (open_dataset(str(tmp_path / x)).manifest.fingerprint for x in "ab")
    assert fa == fb and fa.startswith("xxh3-128:")


def test_fingerprint_changes_with_any_byte(tmp_path):
    _write(str(tmp_path / "a"))
    with sk.ShardWriter(
        str(tmp_path / "b"), shard_size="64KiB", block_size="8KiB", metadata={"k": 1}
    ) as w:
        for i, sample in enumerate(_samples()):
            if i == 399:
                sample["id"] = -1
            w.write(sample)
    fa, fb = (open_dataset(str(tmp_path / x)).manifest.fingerprint for x in "ab")
    assert fa != fb


def test_auto_mixes_raw_and_zstd_blocks(tmp_path):
    """C1: incompressible blocks raw (codec 0), compressible ones zstd (codec 1)."""
    folder = str(tmp_path / "ds")
    with sk.ShardWriter(folder, block_size="16KiB") as w:
        for i in range(8):
            noise = np.random.default_rng(i).bytes(20_000)
            w.write({"jpg": noise} if i % 2 else {"text": "abc " * 5000})
    with open_dataset(folder).open_shard(0) as reader:
        assert list(reader.index.blocks["codec"]) == [1, 0] * 4


def test_writer_exception_leaves_no_manifest(tmp_path):
    """W2: an exception inside ``with`` publishes nothing and removes written shards."""
    folder = str(tmp_path / "ds")
    with pytest.raises(RuntimeError):
        with sk.ShardWriter(folder, shard_size=1, block_size=1) as w:
            for sample in _samples():
                w.write(sample)
                if sample["id"] == 50:
                    raise RuntimeError("boom")
    assert not os.path.exists(os.path.join(folder, "manifest.json"))
    assert not [n for n in os.listdir(os.path.join(folder, "shards")) if n.endswith(".sks")]


def test_overwrite_removes_stale_shards(tmp_path):
    folder = str(tmp_path / "ds")
    _write(folder)
    with pytest.raises(FileExistsError, match="overwrite"):
        sk.ShardWriter(folder)
    with sk.ShardWriter(folder, overwrite=True) as w:
        w.write({"x": 1})
    assert sorted(read_tree(folder)) == ["manifest.json", "shards/shard-000000.sks"]
    assert list(open_dataset(folder).samples()) == [{"x": 1}]
