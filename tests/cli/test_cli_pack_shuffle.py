"""``shardkit pack`` shuffles by default (specs/pack-shuffle.md); ``info`` shows the order (M9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardkit.cli import main
from shardkit.read import open_dataset


def make_sorted_jsonl(path: Path, num_rows: int = 2000) -> None:
    rows = [{"id": i, "label": i // 20} for i in range(num_rows)]  # 100 classes, sorted
    path.write_bytes(b"\n".join(json.dumps(r).encode() for r in rows))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_pack_shuffles_by_default_and_info_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_sorted_jsonl(tmp_path / "rows.jsonl")
    code, text = run(capsys, "pack", str(tmp_path / "rows.jsonl"), str(tmp_path / "out"), "--no-progress",
                     "--shard-size", "4KiB")
    assert code == 0, text
    dataset = open_dataset(str(tmp_path / "out"))
    ids = [s["id"] for s in dataset.samples()]
    assert sorted(ids) == list(range(2000)) and ids != sorted(ids)
    first_shard = dataset.manifest.shards[0].num_samples
    labels = [s["label"] for s in dataset.samples()][:first_shard]
    assert first_shard >= 100 and len(set(labels)) > 40  # sorted input: 1 or 2 classes per shard
    code, text = run(capsys, "info", str(tmp_path / "out"))
    assert code == 0 and "shuffled at pack time (sort-by-key-v1, seed 0)" in text
    code, text = run(capsys, "info", str(tmp_path / "out"), "--json")
    assert json.loads(text)["order"] == {"shuffled": True, "method": "sort-by-key-v1", "seed": 0}


def test_no_shuffle_and_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_sorted_jsonl(tmp_path / "rows.jsonl")
    src = str(tmp_path / "rows.jsonl")
    assert run(capsys, "pack", src, str(tmp_path / "plain"), "--no-progress", "--no-shuffle")[0] == 0
    assert [s["id"] for s in open_dataset(str(tmp_path / "plain")).samples()] == list(range(2000))
    assert "source order (as written: pack --no-shuffle" in run(capsys, "info", str(tmp_path / "plain"))[1]
    for name, seed in (("s1", "1"), ("s2", "2")):
        assert run(capsys, "pack", src, str(tmp_path / name), "--no-progress", "--seed", seed)[0] == 0
    one, two = ([s["id"] for s in open_dataset(str(tmp_path / n)).samples()] for n in ("s1", "s2"))
    assert one != two and sorted(one) == sorted(two)


@pytest.mark.parametrize("extra, message", [
    (["--shuffle-memory", "lots"], "not a size"),
    (["--seed", "-1"], "shuffle seed"),
])
def test_bad_shuffle_options_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    make_sorted_jsonl(tmp_path / "rows.jsonl", 10)
    code, text = run(capsys, "pack", str(tmp_path / "rows.jsonl"), str(tmp_path / "out"), "--no-progress", *extra)
    assert code == 2 and message in text
    assert not (tmp_path / "out").exists()
