"""Hostile and odd files never cost unbounded memory and never hang (specs/shard-format.md I12,
I13; specs/manifest.md M1, M4, M6): the real ``shardkit`` command in a subprocess, its peak
resident memory measured (``ru_maxrss`` of the child), each refusal naming the file."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import shardkit as sk
from tests.helpers.hostile import bomb_block, run_measured, write_dataset

SHARD0 = "shards/shard-000000.sks"
GIB = 1 << 30
PEAK_MIB = 200  # the command itself needs ~40-80 MiB; reading a GiB whole would need > 1000


@pytest.fixture
def dataset(tmp_path) -> str:
    folder = str(tmp_path / "ds")
    with sk.ShardWriter(folder, shard_size=1200, block_size=300) as w:
        for i in range(40):
            w.write({"id": i, "tokens": np.arange(i % 5 + 10, dtype=np.int32)})
    return folder


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> str:
    """A 33 KB shard whose one zstd frame honestly declares (and holds) a 1 GiB block."""
    folder = str(tmp_path_factory.mktemp("bomb") / "ds")
    write_dataset(folder, [bomb_block(GIB)], {"b": {"type": "bytes"}})
    assert os.path.getsize(os.path.join(folder, SHARD0)) < 40_000
    return folder


def set_manifest_size(folder: str, num_bytes: int) -> None:
    """Make the manifest agree with a shard's new size (sizes are not in the fingerprint)."""
    path = os.path.join(folder, "manifest.json")
    with open(path) as fh:
        raw = json.load(fh)
    raw["shards"][0]["num_bytes"] = num_bytes
    raw["num_bytes"] = sum(s["num_bytes"] for s in raw["shards"])
    with open(path, "w") as fh:
        json.dump(raw, fh)


@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
def test_verify_checks_a_sparse_shard_size_before_reading_it(dataset, quick):
    """I13: a 1 GiB sparse file where the manifest expects a small shard costs no memory."""
    os.truncate(os.path.join(dataset, SHARD0), GIB)
    code, peak, out = run_measured("verify", dataset, "--no-progress", *(["--quick"] if quick else []))
    assert code == 1, out
    assert f"{SHARD0}: {GIB} bytes, manifest says" in out
    assert peak < PEAK_MIB, f"verify peaked at {peak} MiB"


@pytest.mark.slow
@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
def test_verify_streams_the_checksum_of_a_1gib_shard(dataset, quick):
    """I13: when the manifest agrees with a 1 GiB (sparse) shard's size, its checksum is streamed
    in chunks: memory stays small, the mismatch is still found."""
    os.truncate(os.path.join(dataset, SHARD0), GIB)
    set_manifest_size(dataset, GIB)
    code, peak, out = run_measured("verify", dataset, "--no-progress", *(["--quick"] if quick else []))
    assert code == 1, out
    assert "checksum xxh64:" in out and SHARD0 in out
    assert peak < PEAK_MIB, f"verify peaked at {peak} MiB"


def test_verify_refuses_a_block_declaring_more_than_the_maximum(bomb):
    """I12: the block is refused before it is decompressed, naming shard and block; exit 1."""
    code, peak, out = run_measured("verify", bomb, "--no-progress")
    assert code == 1, out
    assert SHARD0 in out and "block 0" in out and "maximum block size 268435456" in out
    assert peak < PEAK_MIB, f"verify peaked at {peak} MiB"


def test_head_refuses_a_block_declaring_more_than_the_maximum(bomb):
    code, peak, out = run_measured("head", bomb)
    assert code == 1, out
    assert SHARD0 in out and "block 0" in out and "maximum block size" in out
    assert "Traceback" not in out
    assert peak < PEAK_MIB, f"head peaked at {peak} MiB"


def test_the_block_limit_is_configurable_from_the_command_line_and_environment(bomb):
    """I12: ``verify --max-block-size`` or SHARDKIT_MAX_BLOCK_BYTES lowers (or raises) the limit;
    a bad value is named."""
    code, _, out = run_measured("verify", bomb, "--no-progress", "--max-block-size", "2KiB")
    assert code == 1 and "maximum block size 2048" in out
    code, _, out = run_measured("verify", bomb, "--no-progress", env={"SHARDKIT_MAX_BLOCK_BYTES": "1000"})
    assert code == 1 and "maximum block size 1000" in out
    code, _, out = run_measured("verify", bomb, "--no-progress", env={"SHARDKIT_MAX_BLOCK_BYTES": "lots"})
    assert code != 0 and "SHARDKIT_MAX_BLOCK_BYTES" in out and "Traceback" not in out


def _replace_with(path: str, kind: str) -> None:
    os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero-link":
        os.symlink("/dev/zero", path)
    else:
        os.mkdir(path)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "directory"])
@pytest.mark.parametrize("command", [["verify", "--no-progress"], ["verify", "--quick", "--no-progress"], ["head"]])
def test_a_shard_that_is_not_a_regular_file_is_refused_not_read(dataset, kind, command):
    """I14: a FIFO, a device or a directory in a shard's place is named and refused at once
    (no hang, no memory), exit 1."""
    _replace_with(os.path.join(dataset, SHARD0), kind)
    code, peak, out = run_measured(command[0], dataset, *command[1:])
    assert code == 1, out
    assert os.path.join(dataset, SHARD0) in out and "not a regular file" in out
    assert "Traceback" not in out and "Errno" not in out
    assert peak < PEAK_MIB


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
@pytest.mark.parametrize("command", ["verify", "info", "head"])
def test_a_manifest_that_is_not_a_regular_file_is_refused_with_exit_2(dataset, kind, command):
    _replace_with(os.path.join(dataset, "manifest.json"), kind)
    code, _, out = run_measured(command, dataset)
    assert code == 2, out
    assert os.path.join(dataset, "manifest.json") in out and "not a regular file" in out
