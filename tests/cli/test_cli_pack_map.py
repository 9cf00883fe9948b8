"""``shardkit pack --map`` through the real ``shardkit`` command: every pack option applies to a
mapped pack (specs/token-blocks.md TB10, TB21; pack-shuffle.md PS7), its inputs are refused and
parsed as plain pack inputs are (pack-inputs.md PI1), ``--map`` finds a module in the current
folder, and a shard bounds its blocks (shard-format.md I15)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardkit.read import open_dataset
from tests.helpers import tokenize_map
from tests.helpers.files import read_tree

SHARDKIT = os.path.join(os.path.dirname(sys.executable), "shardkit")
WORDS = "tests.helpers.tokenize_map:words"
HANG_GUARD_S = 300  # a hang fails the test instead of stalling the suite; no timing is asserted


def shardkit(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess[str]:
    """The ``shardkit`` console script: like a user's shell, it does not put the current folder
    on ``sys.path`` (``python -m`` would). ``tests.helpers`` comes from ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]),
                                                       os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([SHARDKIT, *args], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=cwd, env=env)


def records_file(path: Path, num: int = 700) -> list[dict]:
    kinds = ("list", "dict", "none", "list")
    records = [{"id": i, "kind": kinds[i % 4], "text": " ".join(tokenize_map.WORDS[: i % 5])} for i in range(num)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


@pytest.mark.slow
def test_map_with_shuffle_seed_and_workers_writes_the_shuffled_pack_of_the_mapped_rows(tmp_path: Path) -> None:
    """PS7, TB21: ``--map`` with ``--shuffle --seed 3`` (1 and 2 workers) gives the bytes plain
    ``pack --seed 3`` gives the mapped rows; ``info`` names the order; overwrite safety holds."""
    records = records_file(tmp_path / "rows.jsonl")
    mapped = tokenize_map.mapped_words(records)
    (tmp_path / "mapped.jsonl").write_text("".join(json.dumps(s) + "\n" for s in mapped))
    sizes = ("--shard-size", "8KiB", "--block-size", "2KiB", "--no-progress")
    for workers in ("1", "2"):
        done = shardkit("pack", str(tmp_path / "rows.jsonl"), str(tmp_path / f"w{workers}"), "--map", WORDS,
                        "--shuffle", "--seed", "3", "--workers", workers, *sizes)
        assert done.returncode == 0, done.stderr
    done = shardkit("pack", str(tmp_path / "mapped.jsonl"), str(tmp_path / "plain"), "--seed", "3", *sizes)
    assert done.returncode == 0, done.stderr
    assert read_tree(tmp_path / "w1") == read_tree(tmp_path / "w2") == read_tree(tmp_path / "plain")
    dataset = open_dataset(str(tmp_path / "w1"))
    assert dataset.manifest.order == {"shuffled": True, "method": "sort-by-key-v1", "seed": 3}
    assert [s["id"] for s in dataset.samples()] != [s["id"] for s in mapped]
    info = shardkit("info", str(tmp_path / "w1"))
    assert "shuffled at pack time (sort-by-key-v1, seed 3)" in info.stdout, info.stdout + info.stderr
    again = shardkit("pack", str(tmp_path / "rows.jsonl"), str(tmp_path / "w1"), "--map", WORDS, *sizes)
    assert again.returncode != 0 and "--overwrite" in again.stderr
    assert read_tree(tmp_path / "w1") == read_tree(tmp_path / "w2")


@pytest.mark.slow
def test_map_with_skip_bad_skips_and_lists_the_records_it_could_not_map(tmp_path: Path) -> None:
    lines = [{"id": 0, "kind": "dict", "text": "a"}, {"id": 1, "kind": "raise", "text": "b"},
             {"id": 2, "kind": "str", "text": "c"}, {"id": 3, "kind": "dict", "text": "d"}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    done = shardkit("pack", str(tmp_path / "rows.jsonl"), str(tmp_path / "out"), "--map", WORDS, "--no-progress")
    assert done.returncode == 1 and "rows.jsonl:2: the map function raised KeyError" in done.stderr, done.stderr
    done = shardkit("pack", str(tmp_path / "rows.jsonl"), str(tmp_path / "out"), "--map", WORDS, "--skip-bad",
                    "--no-shuffle", "--no-progress")
    assert done.returncode == 0, done.stderr
    dataset = open_dataset(str(tmp_path / "out"))
    assert [s["id"] for s in dataset.samples()] == [0, 3]
    assert [e["origin"].rsplit("/", 1)[-1] for e in dataset.manifest.metadata["skipped"]] == ["rows.jsonl:2",
                                                                                                "rows.jsonl:3"]
    assert "skipped 2 bad item(s)" in done.stdout


@pytest.mark.slow
def test_map_imports_a_module_from_the_current_folder(tmp_path: Path) -> None:
    """TB10: ``--map mod:fn`` finds ``./mod.py`` (as ``python -m`` would), in the workers too; a
    module that is nowhere says where it was looked for."""
    (tmp_path / "my_local_map.py").write_text(textwrap.dedent("""
        def double(record):
            return {"n": record["n"] * 2}
    """))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(600)))
    done = shardkit("pack", "rows.jsonl", "out", "--map", "my_local_map:double", "--workers", "2",
                    "--no-shuffle", "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [s["n"] for s in open_dataset(str(tmp_path / "out")).samples()] == [2 * i for i in range(600)]
    done = shardkit("pack", "rows.jsonl", "out2", "--map", "no_such_map_module:fn", "--no-progress", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "No module named 'no_such_map_module'" in done.stderr and str(tmp_path) in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("ref", [".my_local_map:double", ".:double", "..pkg.mod:fn"])
def test_a_relative_map_module_is_a_usage_error(tmp_path: Path, ref: str) -> None:
    (tmp_path / "rows.jsonl").write_text('{"n": 1}\n')
    done = shardkit("pack", "rows.jsonl", "out", "--map", ref, "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert "relative module name" in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["in.txt", "in.jsonl"])
def test_a_fifo_map_input_is_refused_by_name(tmp_path: Path, name: str) -> None:
    """PI1 for ``--map``: a FIFO (which would block forever) is refused, naming it."""
    os.mkfifo(tmp_path / name)
    done = shardkit("pack", str(tmp_path / name), str(tmp_path / "out"), "--map", WORDS, "--no-progress")
    assert done.returncode == 1, done.stderr
    assert f"{name}: not a regular file (a FIFO)" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_map_jsonl_line_nested_too_deep_is_named(tmp_path: Path) -> None:
    """S3 on write, with ``--map``: the line is named, never a RecursionError; --skip-bad skips it."""
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "rows.jsonl").write_text(f'{{"id": 0, "kind": "dict", "text": "a"}}\n{{"deep": {deep}}}\n')
    done = shardkit("pack", str(tmp_path / "rows.jsonl"), str(tmp_path / "out"), "--map", WORDS, "--no-progress")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "rows.jsonl:2: not valid JSON" in done.stderr
    done = shardkit("pack", str(tmp_path / "rows.jsonl"), str(tmp_path / "out"), "--map", WORDS, "--skip-bad",
                    "--no-progress")
    assert done.returncode == 0, done.stderr
    assert [s["id"] for s in open_dataset(str(tmp_path / "out")).samples()] == [0]


@pytest.mark.slow
def test_a_shard_size_below_the_block_size_cuts_small_shards(tmp_path: Path) -> None:
    """I15: ``--shard-size 8KiB`` (default 1 MiB blocks) of ~1.2 MiB of small rows gives shards
    of about 8 KiB, not two shards of one 1 MiB block each."""
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"i": i, "t": "xyz"}) + "\n" for i in range(100_000)))
    done = shardkit("pack", str(tmp_path / "rows.jsonl"), str(tmp_path / "out"), "--shard-size", "8KiB",
                    "--no-progress")
    assert done.returncode == 0, done.stderr
    shards = open_dataset(str(tmp_path / "out")).manifest.shards
    assert all(s.raw_bytes < 2 * (8 << 10) + 1024 for s in shards)
    assert len(shards) > sum(s.raw_bytes for s in shards) // (2 * (8 << 10) + 1024)
