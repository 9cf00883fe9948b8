"""Hostile inputs give the documented error naming file, shard and sample — exit 1 for corrupt
data, 2 for an unreadable manifest — never a traceback (specs/shard-format.md SV3, B5;
manifest.md M1, M4, M6). Run through the real ``shardkit`` command in a subprocess."""

from __future__ import annotations

import json
import os
import re
import struct

import msgpack
import numpy as np
import pytest

import shardkit as sk
from shardkit.format import Manifest, ShardInfo
from shardkit.format.block_codec import CODEC_RAW
from shardkit.format.column_block import LAYOUT_COLUMNS
from shardkit.format.shard_builder import SealedBlock
from shardkit.read import open_dataset
from tests.helpers.hostile import run_measured, write_dataset

SHARD0 = "shards/shard-000000.sks"


def deep_json(depth: int) -> str:
    return "[" * (depth - 1) + "0" + "]" * (depth - 1)


@pytest.mark.parametrize("depth", [150, 100_000])
def test_pack_names_the_jsonl_line_nested_too_deep_and_skip_bad_skips_it(tmp_path, depth):
    """SV3 on write: the line is named (file:line); ``--skip-bad`` packs the rest and lists it."""
    src = tmp_path / "rows.jsonl"
    src.write_text(f'{{"a": 1}}\n{{"deep": {deep_json(depth)}}}\n{{"a": 3}}\n')
    code, _, out = run_measured("pack", str(src), str(tmp_path / "out"), "--no-progress")
    assert code == 1, out
    assert "rows.jsonl:2" in out and "Traceback" not in out
    assert ("nested deeper than 100" in out) if depth < 1000 else ("recursion" in out)
    code, _, out = run_measured("pack", str(src), str(tmp_path / "out"), "--no-progress", "--skip-bad")
    assert code == 0, out
    dataset = open_dataset(str(tmp_path / "out"))
    assert [s["a"] for s in dataset.samples()] == [1, 3]
    assert [s["origin"].rsplit("/", 1)[-1] for s in dataset.manifest.metadata["skipped"]] == ["rows.jsonl:2"]


def raw_dataset(folder: str, samples_bytes: list[bytes], schema: dict) -> None:
    """A dataset whose one block holds these msgpack bytes as they are (no encoder checks)."""
    raw = b"".join(samples_bytes)
    offsets = np.cumsum([0, *map(len, samples_bytes)]).astype("<u4")
    write_dataset(folder, [SealedBlock(CODEC_RAW, raw, len(raw), offsets)], schema)


def nested_sample(depth: int) -> bytes:
    value: object = 0
    for _ in range(depth - 1):
        value = [value]
    return msgpack.packb({"x": value})


@pytest.mark.parametrize("command", [["head"], ["verify", "--no-progress"]])
@pytest.mark.parametrize("depth", [600, 2000])
def test_a_sample_nested_too_deep_is_corrupt_data_named_with_its_shard(tmp_path, command, depth):
    """SV3 on read: 600 levels (over the limit) and 2000 (over msgpack's stack, whose own error
    says nothing) both name the shard, block and reason; exit 1."""
    folder = str(tmp_path / "ds")
    sample = nested_sample(depth) if depth < 1024 else b"\x81\xa1x" + b"\x91" * depth + b"\xc0"
    raw_dataset(folder, [msgpack.packb({"x": 1}), sample], {"x": {"type": "any", "types": ["int", "list"]}})
    code, _, out = run_measured(command[0], folder, *command[1:])
    assert code == 1, out
    assert SHARD0 in out and "block 0" in out and "Traceback" not in out
    assert "nested deeper than" in out and ("sample 1" in out or depth >= 1024)


def test_head_shows_a_sample_at_the_nesting_limit(tmp_path):
    folder = str(tmp_path / "ds")
    with sk.ShardWriter(folder) as writer:
        value: object = 0
        for _ in range(98):
            value = {"k": value}
        writer.write({"x": [value]})
    code, _, out = run_measured("head", folder)
    assert code == 0 and "nested deeper" in out, out


def column_block_with_tail(tail: list[int]) -> SealedBlock:
    start = 256
    header = msgpack.packb({"n": 2, "columns": [{
        "name": "a", "kind": "array", "dtype": "<i4", "as": "<i4", "tail": tail,
        "data": [start, 8], "offsets": start + 8,
    }]})
    head = struct.pack("<I", len(header)) + header
    raw = head + bytes(start - len(head)) + bytes(8) + np.array([0, 1, 2], dtype="<u4").tobytes()
    offsets = np.array([0, 0, len(raw)], dtype="<u4")
    return SealedBlock(CODEC_RAW, raw, len(raw), offsets, LAYOUT_COLUMNS)


@pytest.mark.parametrize("command", [["head"], ["verify", "--no-progress"]])
def test_a_column_tail_that_overflows_is_corrupt_data(tmp_path, command):
    """B5: [2**32, 2**32] (its int64 product wraps to 0) is named, not a ZeroDivisionError."""
    folder = str(tmp_path / "ds")
    write_dataset(folder, [column_block_with_tail([2**32, 2**32])],
                  {"a": {"type": "ndarray", "dtype": "<i4", "shape": [None, None, None]}})
    code, _, out = run_measured(command[0], folder, *command[1:])
    assert code == 1, out
    assert SHARD0 in out and "block 0" in out and "column 'a'" in out and "Traceback" not in out


@pytest.fixture
def dataset(tmp_path) -> str:
    folder = str(tmp_path / "ds")
    with sk.ShardWriter(folder, shard_size=600, block_size=200) as w:
        for i in range(20):
            w.write({"id": i, "tokens": np.arange(3, dtype=np.int32)})
    return folder


def rewrite_manifest(folder: str, edit) -> None:
    path = os.path.join(folder, "manifest.json")
    with open(path) as fh:
        raw = json.load(fh)
    text = edit(raw)
    if isinstance(text, dict):  # a consistent lie: fingerprint and totals recomputed
        raw = text
        shards = tuple(ShardInfo(**entry) for entry in raw["shards"])
        raw["fingerprint"] = Manifest(shards=shards, schema=raw["schema"]).compute_fingerprint()
        raw["num_samples"] = sum(s["num_samples"] for s in raw["shards"])
        text = json.dumps(raw)
    with open(path, "wb") as fh:
        fh.write(text if isinstance(text, bytes) else text.encode())


def _set_shard_count(raw: dict, value: int) -> dict:
    raw["shards"][0]["num_samples"] = value
    return raw


def _set_schema(raw: dict, field: str, desc: dict) -> dict:
    raw["schema"][field] = desc
    return raw


MANIFEST_CASES = {
    "5000-digit integer": (lambda raw: json.dumps(raw)[:-1] + ', "big": ' + "9" * 5000 + "}",
                           "integer literal of 5000 characters"),
    "num_samples 2**70": (lambda raw: _set_shard_count(raw, 2**70), "integer literal of 22 characters"),
    "num_samples 2**63": (lambda raw: _set_shard_count(raw, 2**63), r"shards\[0\]: num_samples must be an integer"),
    "any without types": (lambda raw: _set_schema(raw, "id", {"type": "any"}), "schema field 'id'"),
    "ndarray without shape": (lambda raw: _set_schema(raw, "tokens", {"type": "ndarray", "dtype": "<i4"}),
                              "schema field 'tokens'"),
    "UTF-16": (lambda raw: json.dumps(raw).encode("utf-16"), "not UTF-8"),
}


@pytest.mark.parametrize("case", list(MANIFEST_CASES))
@pytest.mark.parametrize("command", [["verify", "--no-progress"], ["info"], ["head"]])
def test_a_malformed_manifest_is_named_with_exit_2(dataset, case, command):
    """M1, M4, M6: refused on open, naming the manifest and the field; never a traceback."""
    edit, problem = MANIFEST_CASES[case]
    rewrite_manifest(dataset, edit)
    code, _, out = run_measured(command[0], dataset, *command[1:])
    assert code == 2, out
    assert os.path.join(dataset, "manifest.json") in out and "Traceback" not in out
    assert re.search(problem, out), out
