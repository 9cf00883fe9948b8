"""``shardkit plan DATASET --quality FIELD`` (specs/partition.md P14): distinct labels per
batch against a uniform shuffle, and a warning when a sorted, unshuffled pack makes them poor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardkit.cli import main


def pack_sorted(tmp_path: Path, name: str, *flags: str) -> str:
    src = tmp_path / "rows.jsonl"
    if not src.exists():  # 100 classes x 40 samples, sorted by class
        src.write_bytes(b"\n".join(json.dumps({"id": i, "label": i // 40}).encode() for i in range(4000)))
    out = str(tmp_path / name)
    assert main(["pack", str(src), out, "--no-progress", "--shard-size", "2KiB", *flags]) == 0
    return out


def plan(capsys: pytest.CaptureFixture[str], out: str, *extra: str) -> tuple[int, str, str]:
    code = main(["plan", out, "--batch-size", "64", "--world-size", "2", "--workers", "2",
                 "--shuffle-window", "256", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_sorted_unshuffled_pack_is_reported_poor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = pack_sorted(tmp_path, "plain", "--no-shuffle")
    capsys.readouterr()
    code, text, err = plan(capsys, out, "--quality", "label")
    assert code == 0
    assert "quality of 'label'" in text and "a uniform shuffle gives" in text
    assert "warning:" in err and "shardkit pack" in err
    code, text, _ = plan(capsys, out, "--quality", "label", "--json")
    quality = json.loads(text)["quality"]
    assert quality["poor"] and quality["ratio"] < 0.5 and 40 < quality["uniform"] < 64


def test_shuffled_pack_is_near_uniform(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = pack_sorted(tmp_path, "mixed")
    capsys.readouterr()
    code, text, err = plan(capsys, out, "--quality", "label", "--json")
    quality = json.loads(text)["quality"]
    assert code == 0 and not quality["poor"] and quality["ratio"] >= 0.95 and err == ""


def test_unknown_quality_field_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = pack_sorted(tmp_path, "plain", "--no-shuffle")
    capsys.readouterr()
    code, _, err = plan(capsys, out, "--quality", "colour")
    assert code == 2 and "no field 'colour'" in err and "label" in err
