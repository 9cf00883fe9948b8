"""The per-sample length index (specs/manifest.md M10-M13): which fields the writer records, the
file and manifest entry, reading it without a shard scan, verify, corruption and overwrite."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.cli import main
from shardkit.errors import CorruptShardError, EncodeError, ManifestError, NotFoundError
from shardkit.format import MANIFEST_NAME, decode_manifest
from shardkit.read import open_dataset
from shardkit.read.tokens.lengths import document_lengths, scan_lengths
from shardkit.read.verify import verify_dataset

SMALL = {"shard_size": 3000, "block_size": 700}


def _write(root: Path, samples: list[dict[str, Any]], **options: Any) -> Path:
    with sk.ShardWriter(str(root), **{**SMALL, **options}) as writer:
        for sample in samples:
            writer.write(sample)
    return root


def _docs(lengths: list[int], dtype: str = "int32") -> list[dict[str, Any]]:
    return [{"id": i, "tokens": np.arange(n, dtype=dtype) % 100} for i, n in enumerate(lengths)]


def _manifest(root: Path) -> dict[str, Any]:
    return json.loads((root / MANIFEST_NAME).read_text())


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(0, 200), min_size=1, max_size=50),
    dtype=st.sampled_from(["uint8", "int16", "uint16", "int64"]),
    layout=st.sampled_from(["auto", "rows"]),
)
def test_index_holds_every_length_and_replaces_the_scan(tmp_path_factory, lengths, dtype, layout):
    """M11, M12: one uint32 per sample in manifest order, equal to the samples' lengths; with
    it, ``document_lengths`` reads no shard (the shards are gone and it still answers)."""
    root = _write(tmp_path_factory.mktemp("ds"), _docs(lengths, dtype), layout=layout)
    (entry,) = _manifest(root)["lengths"]
    assert entry["field"] == "tokens" and entry["dtype"] == "<u4" and entry["num_bytes"] == 4 * len(lengths)
    assert np.fromfile(root / entry["name"], dtype="<u4").tolist() == lengths
    dataset = open_dataset(str(root))
    assert scan_lengths(dataset, "tokens").tolist() == lengths
    for name in os.listdir(root / "shards"):
        if name.endswith(".sks"):
            os.remove(root / "shards" / name)
    got = document_lengths(dataset, "tokens")
    assert got.dtype == np.uint32 and got.tolist() == lengths


def test_zero_configuration_records_the_integer_array_fields_of_every_sample(tmp_path):
    """M12: integer arrays (1-D or N-D) in every sample; not floats, bools, 0-d arrays, optional
    or mixed-type fields."""
    samples = [
        {
            "tokens": np.arange(i % 7, dtype=np.uint16),
            "pairs": np.zeros((i % 3, 2), dtype=np.int8),
            "mask": np.ones(i % 7, dtype=bool),
            "embedding": np.zeros(4, dtype=np.float32),
            "label": np.array(3, dtype=np.int64),
            "sometimes": np.arange(2) if i % 5 else None,
            "optional": np.arange(3),
        }
        for i in range(60)
    ]
    for sample in samples[30:]:
        del sample["optional"]
    root = _write(tmp_path, samples)
    assert [e["field"] for e in _manifest(root)["lengths"]] == ["tokens", "pairs"]
    dataset = open_dataset(str(root))
    assert document_lengths(dataset, "pairs").tolist() == [i % 3 for i in range(60)]
    assert dataset.manifest.lengths_of("mask") is None


def test_length_index_option(tmp_path):
    """``length_index=()``: no index; a list: exactly those fields; a named field that is not an
    integer array in every sample: ``EncodeError`` and nothing published (W2)."""
    samples = [{"a": np.arange(i % 4), "b": np.arange(i % 5)} for i in range(40)]
    assert "lengths" not in _manifest(_write(tmp_path / "none", samples, length_index=()))
    assert [e["field"] for e in _manifest(_write(tmp_path / "b", samples, length_index=["b"]))["lengths"]] == ["b"]
    with pytest.raises(EncodeError, match=r"length_index: field 'c' is missing or not an integer array"):
        _write(tmp_path / "bad", samples, length_index=["c"])
    assert not (tmp_path / "bad" / MANIFEST_NAME).exists()
    assert [p for p in (tmp_path / "bad").rglob("*") if p.is_file()] == []
    with pytest.raises(TypeError, match="not the string"):
        sk.ShardWriter(str(tmp_path / "str"), length_index="tokens")  # type: ignore[arg-type]


def test_old_datasets_and_empty_ones_have_no_index(tmp_path):
    """A dataset without the field's index falls back to the scan (the golden files predate it)."""
    golden = os.path.join(os.path.dirname(__file__), "..", "..", "golden", "v1", "columns")
    dataset = open_dataset(golden)
    assert dataset.manifest.lengths == ()
    assert document_lengths(dataset, "tokens").tolist() == [1 + i % 6 for i in range(48)]
    assert "lengths" not in _manifest(_write(tmp_path, []))


def test_overwrite_replaces_the_index_and_leaves_no_unnamed_file(tmp_path):
    """W5 with index files: the replaced dataset's index goes with its shards."""
    _write(tmp_path, [{"x": np.arange(3), "y": np.arange(2)}] * 30)
    _write(tmp_path, _docs([5, 0, 9]), overwrite=True)
    dataset = open_dataset(str(tmp_path))
    assert [e.field for e in dataset.manifest.lengths] == ["tokens"]
    assert sorted(os.listdir(tmp_path / "shards")) == ["lengths-000.u32", "shard-000000.sks"]
    report = verify_dataset(dataset)
    assert report.ok and report.unnamed_files == []


def test_index_is_byte_identical_for_any_worker_count(tmp_path):
    """M12, W3: lengths come from the arranged blocks, so the files match for any --workers."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": i, "ids": list(range(i % 13))}) + "\n" for i in range(600)))
    trees = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        assert (
            main(
                [
                    "pack",
                    str(path),
                    str(out),
                    "--workers",
                    str(workers),
                    "--shard-size",
                    "8KiB",
                    "--block-size",
                    "2KiB",
                    "--no-progress",
                ]
            )
            == 0
        )
        trees.append({p.name: p.read_bytes() for p in sorted((out / "shards").iterdir())})
    assert trees[0] == trees[1]


def _corrupt(root: Path, how: str) -> None:
    (entry,) = _manifest(root)["lengths"]
    path = root / entry["name"]
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[0] ^= 1
        path.write_bytes(bytes(data))
    elif how == "truncate":
        path.write_bytes(bytes(data[:-4]))
    else:
        path.unlink()


@pytest.mark.parametrize(
    ("how", "error"), [("flip", CorruptShardError), ("truncate", CorruptShardError), ("missing", NotFoundError)]
)
def test_a_corrupt_index_is_an_error_naming_the_file(tmp_path, capsys, how, error):
    """M11: size and xxh64 are checked on every read; verify reports the file, exit 1."""
    root = _write(tmp_path, _docs([3, 1, 4, 1, 5, 9, 2, 6] * 5))
    _corrupt(root, how)
    with pytest.raises(error, match=r"lengths-000\.u32"):
        document_lengths(open_dataset(str(root)), "tokens")
    assert main(["verify", str(root), "--quick", "--no-progress"]) == 1
    assert "BAD length index shards/lengths-000.u32" in capsys.readouterr().err


def test_full_verify_compares_the_index_with_the_samples(tmp_path, capsys):
    """M11: an index with a valid checksum but wrong lengths fails a full verify (not --quick)."""
    root = _write(tmp_path, _docs([3, 1, 4, 1, 5, 9, 2, 6] * 5))
    manifest = _manifest(root)
    entry = manifest["lengths"][0]
    lengths = np.fromfile(root / entry["name"], dtype="<u4")
    lengths[17] += 1
    (root / entry["name"]).write_bytes(lengths.tobytes())
    from shardkit.format.checksum import xxh64_text

    entry["checksum"] = xxh64_text(lengths.tobytes())  # not in the fingerprint (M10)
    (root / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert main(["verify", str(root), "--quick", "--no-progress"]) == 0
    assert main(["verify", str(root), "--no-progress"]) == 1
    assert "sample 17 " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "../x/lengths-000.u32"}, "unsafe lengths file name"),
        ({"name": "shards/shard-000000.sks"}, "unsafe lengths file name"),
        ({"num_bytes": 8}, "samples need"),
        ({"dtype": "<u8"}, "lengths dtype"),
        ({"field": "nope"}, "schema does not list"),
        ({"checksum": "md5:0"}, "checksum"),
    ],
)
def test_malformed_lengths_entries_are_refused(tmp_path, change, message):
    """M10: every entry is checked when the manifest is opened."""
    root = _write(tmp_path, _docs([2, 3, 4]))
    manifest = _manifest(root)
    manifest["lengths"][0].update(change)
    with pytest.raises(ManifestError, match=message):
        decode_manifest(json.dumps(manifest).encode(), "m.json")
    manifest["lengths"] = [_manifest(root)["lengths"][0]] * 2
    with pytest.raises(ManifestError, match="repeat"):
        decode_manifest(json.dumps(manifest).encode(), "m.json")


def test_parts_join_the_fields_every_part_with_samples_recorded():
    """M12 (Ray engine): parts in order, empty parts neutral, a field one part lacks dropped."""
    from shardkit.write.lengths import combine_parts

    a, b = np.array([1, 2], "<u4").tobytes(), np.array([3], "<u4").tobytes()
    parts = [(2, {"tokens": a, "x": a}), (0, {}), (1, {"tokens": b})]
    assert combine_parts(parts) == {"tokens": a + b}
    assert combine_parts([(0, {})]) == {}
