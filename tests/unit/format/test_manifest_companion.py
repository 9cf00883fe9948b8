"""The binary manifest companion ``manifest.bin`` (specs/manifest.md M15): the same manifest as
the JSON, bound to the exact JSON bytes, validated as strictly, and never preferred over a
JSON it does not describe."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import ManifestError
from shardkit.format import Manifest, ShardInfo, companion_json, decode_manifest, manifest_companion
from shardkit.format.checksum import xxh64_text
from shardkit.format.companion_json import describes_json
from shardkit.format.manifest_companion import COMPANION_NAME, ShardTable, decode_companion, encode_companion
from shardkit.read import manifest_open, open_dataset
from shardkit.read.orphans import unnamed_files
from shardkit.write import output
from tests.helpers.forged import rebound_companion

_PART = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,12}", fullmatch=True).filter(lambda s: ".." not in s)
_NAMES = st.lists(st.one_of(_PART, st.tuples(_PART, _PART).map("/".join)), min_size=1, max_size=30,
                  unique=True).filter(lambda names: "manifest.json" not in names)
_COUNT = st.integers(0, (1 << 63) - 1)


def _manifest(names: list[str], counts: list[int] | None = None, **kwargs: Any) -> Manifest:
    counts = counts or [i + 1 for i in range(len(names))]
    shards = tuple(ShardInfo(n, c, 1000 + i, 2, 2000, 100, f"xxh64:{(i * 7919) % (1 << 64):016x}")
                   for i, (n, c) in enumerate(zip(names, counts, strict=True)))
    return Manifest(shards, {"id": {"type": "int"}}, kwargs.get("metadata", {"k": "é"}), "test",
                    order=kwargs.get("order"))


def _pair(manifest: Manifest) -> tuple[bytes, bytes]:
    data = manifest.to_json()
    return data, encode_companion(data)


@settings(max_examples=40, deadline=None)
@given(names=_NAMES, data=st.data(), order=st.sampled_from([None, {"shuffled": False}]))
def test_companion_decodes_to_the_manifest_the_json_decodes_to(names: list[str], data: st.DataObject,
                                                               order: dict[str, Any] | None) -> None:
    """M15: same shards, schema, metadata, order, fingerprint and totals as the JSON (M5)."""
    counts = data.draw(st.lists(_COUNT.map(lambda c: c // (1 << 8)), min_size=len(names), max_size=len(names)))
    body, companion = _pair(_manifest(names, counts, order=order))
    from_json = decode_manifest(body)
    got = decode_companion(companion, xxh64_text(body))
    assert isinstance(got.shards, ShardTable)
    assert list(got.shards) == list(from_json.shards) and got.shards == from_json.shards
    assert (got.schema, got.metadata, got.order, got.created_by) == \
        (from_json.schema, from_json.metadata, from_json.order, from_json.created_by)
    assert got.fingerprint == from_json.fingerprint == got.compute_fingerprint()
    assert (got.num_samples, got.num_bytes, got.raw_bytes, got.shard_sizes) == \
        (from_json.num_samples, from_json.num_bytes, from_json.raw_bytes, from_json.shard_sizes)
    assert got.shards[1:3] == from_json.shards[1:3]


def test_a_companion_of_another_json_is_refused() -> None:
    """M15: bound to the exact bytes: a JSON changed by one byte no longer matches."""
    body, companion = _pair(_manifest(["a", "b"]))
    other = body.replace(b'"test"', b'"tesT"')
    with pytest.raises(ManifestError, match="describes another manifest.json"):
        decode_companion(companion, xxh64_text(other))


def test_a_damaged_companion_is_refused() -> None:
    body, companion = _pair(_manifest(["a", "b"]))
    damaged = bytearray(companion)
    damaged[len(damaged) // 2] ^= 1
    with pytest.raises(ManifestError, match="damaged"):
        decode_companion(bytes(damaged), xxh64_text(body))


@pytest.mark.parametrize("names", [["../x"], ["a/b/c"], [".hidden"], ["manifest.json"], ["a", "a"], ["a b"]])
def test_unsafe_or_repeated_names_are_refused(names: list[str]) -> None:
    """M3 holds for the companion as for the JSON."""
    body, companion = _pair(_manifest(names))
    with pytest.raises(ManifestError, match=r"unsafe shard name|repeat"):
        decode_companion(companion, xxh64_text(body))


def test_counts_and_fingerprint_are_checked() -> None:
    """M4 (index_bytes <= num_bytes) and M5 (fingerprint recomputed from the columns)."""
    bad = Manifest((ShardInfo("a", 1, 10, 1, 10, 11, "xxh64:" + "0" * 16),), {}, {})
    body, companion = _pair(bad)
    with pytest.raises(ManifestError, match="index_bytes"):
        decode_companion(companion, xxh64_text(body))
    body = _manifest(["a", "b"]).to_json()
    head = json.loads(body)
    forged = body.replace(head["fingerprint"].encode(), b"xxh3-128:" + b"0" * 32)
    with pytest.raises(ManifestError, match="fingerprint"):
        decode_companion(encode_companion(forged), xxh64_text(forged))


def _pack(path: Path, count: int) -> sk.Manifest:
    with sk.ShardWriter(str(path), shard_size="1KiB") as writer:
        for i in range(count):
            writer.write({"id": i, "tokens": np.arange(i % 50, dtype=np.int32)})
    return open_dataset(str(path)).manifest


def test_writer_publishes_a_companion_for_a_large_manifest_and_readers_use_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """M15: from COMPANION_MIN_BYTES the writer adds manifest.bin; open_dataset reads it instead of
    parsing the JSON; verify does not call it an orphan; once stale, the JSON wins."""
    monkeypatch.setattr(output, "COMPANION_MIN_BYTES", 1)
    monkeypatch.setattr(manifest_open, "COMPANION_MIN_BYTES", 1)
    from_json = _pack(tmp_path / "ds", 200)  # opened through the companion already
    assert (tmp_path / "ds" / COMPANION_NAME).is_file()
    dataset = open_dataset(str(tmp_path / "ds"))
    assert isinstance(dataset.manifest.shards, ShardTable)
    assert dataset.manifest.shards == decode_manifest((tmp_path / "ds" / "manifest.json").read_bytes()).shards
    assert sorted(s["id"] for s in dataset.samples()) == list(range(200)) and from_json.num_samples == 200
    assert unnamed_files(dataset) == []
    manifest = tmp_path / "ds" / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"created_by": "shardkit', b'"created_by": "Shardkit'))
    with caplog.at_level(logging.WARNING):
        reopened = open_dataset(str(tmp_path / "ds"))
    assert not isinstance(reopened.manifest.shards, ShardTable) and "is not used" in caplog.text
    assert reopened.manifest.created_by.startswith("Shardkit")


def test_small_manifests_get_no_companion(tmp_path: Path) -> None:
    _pack(tmp_path / "ds", 20)
    assert not (tmp_path / "ds" / COMPANION_NAME).exists()


@pytest.mark.parametrize("count", [0, 1, 7, 9])
def test_fingerprint_is_the_same_hashed_in_slices(count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """M5 through the companion: the sliced canonical text hashes like the JSON's whole one."""
    monkeypatch.setattr(manifest_companion, "_SLICE", 3)
    body, companion = _pair(_manifest([f"s{i}" for i in range(count)]) if count else
                            Manifest((), {"id": {"type": "int"}}, {}))
    got = decode_companion(companion, xxh64_text(body))
    assert got.fingerprint == decode_manifest(body).fingerprint == got.compute_fingerprint()


@settings(max_examples=30, deadline=None)
@given(names=_NAMES, order=st.sampled_from([None, {"shuffled": True}]), slice_size=st.sampled_from([1, 2, 8192]))
def test_a_companion_re_encodes_to_exactly_the_writers_json_m20(names: list[str], order: dict[str, Any] | None,
                                                                slice_size: int) -> None:
    """M20: the text re-encoded from a decoded companion is the writer's JSON, byte for byte
    (whatever the slicing); one byte changed anywhere and it no longer is."""
    body, companion = _pair(_manifest(names, order=order))
    decoded = decode_companion(companion, xxh64_text(body))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(companion_json, "_SLICE", slice_size)
        assert describes_json(decoded, body)
        assert not describes_json(decoded, body[:-1] + b" ")
        assert not describes_json(decoded, body.replace(b'"num_samples": 1,', b'"num_samples": 2,', 1))
    empty = Manifest((), {"id": {"type": "int"}}, {})
    assert describes_json(decode_companion(encode_companion(empty.to_json()), xxh64_text(empty.to_json())),
                          empty.to_json())


def test_a_forged_companion_rebound_to_the_json_is_not_used_m20(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """M20: a companion of another dataset that records this JSON's xxh64 (its trailer
    recomputed) decodes; the reader still parses the JSON, and says why."""
    monkeypatch.setattr(manifest_open, "COMPANION_MIN_BYTES", 1)
    genuine = _pack(tmp_path / "ds", 30)
    json_data = (tmp_path / "ds" / "manifest.json").read_bytes()
    other = _manifest(["a", "b"]).to_json()
    (tmp_path / "ds" / COMPANION_NAME).write_bytes(rebound_companion(encode_companion(other), json_data))
    with caplog.at_level(logging.WARNING):
        opened = open_dataset(str(tmp_path / "ds")).manifest
    assert not isinstance(opened.shards, ShardTable) and opened.shards == genuine.shards
    assert "does not re-encode to the manifest.json" in caplog.text
