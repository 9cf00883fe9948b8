"""``shardkit plan`` says when an epoch yields no batch (exit 1) or drops a large share (P16, P17)."""

from __future__ import annotations

import json

import pytest

import shardkit as sk
from shardkit.cli import main


@pytest.fixture(scope="module")
def hundred(tmp_path_factory) -> str:
    folder = str(tmp_path_factory.mktemp("plan") / "ds")
    with sk.ShardWriter(folder) as writer:
        for i in range(100):
            writer.write({"id": i})
    return folder


def test_no_batch_is_an_error_with_the_numbers(hundred, capsys):
    code = main(["plan", hundred, "--batch-size", "64", "--world-size", "2", "--workers", "2"])
    out = capsys.readouterr()
    assert code == 1 and "0 steps per rank" in out.out
    assert out.err.startswith("error: the epoch yields no batch (100 samples, 2 rank(s) x 2 worker(s)")
    assert "batch_size <= 50" in out.err


def test_large_drop_is_a_warning_and_in_the_json(hundred, capsys):
    code = main(["plan", hundred, "--batch-size", "32", "--world-size", "2", "--json"])
    out = capsys.readouterr()
    assert code == 0 and out.err.startswith("warning: tail='drop' drops 36 of 100 samples (36%)")
    assert json.loads(out.out)["warnings"] == [out.err[len("warning: "):].strip()]


def test_pad_and_small_drops_are_quiet(hundred, capsys):
    assert main(["plan", hundred, "--batch-size", "64", "--world-size", "2", "--tail", "pad"]) == 0
    assert main(["plan", hundred, "--batch-size", "5", "--world-size", "2"]) == 0
    assert capsys.readouterr().err == ""


def test_an_unreadable_manifest_exits_2_naming_it(tmp_path, capsys):
    (tmp_path / "manifest.json").write_text('{"x":')
    assert main(["plan", str(tmp_path), "--batch-size", "2"]) == 2
    assert "manifest.json: not valid JSON" in capsys.readouterr().err
