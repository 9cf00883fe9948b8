"""Usage errors: every subcommand, run as a real ``shardkit`` process, exits 2 with one line on
stderr and no traceback (README "CLI"); a closed output pipe ends a command quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SHARDKIT = os.path.join(os.path.dirname(sys.executable), "shardkit")
DATASET = "{tmp}/ds"
SHARD = "{tmp}/ds/shards/shard-000000.sks"
ROWS = "{tmp}/rows.jsonl"

# (argv with {tmp} placeholders, a fragment the one-line message must hold)
BAD_ARGUMENTS = [
    (["pack", ROWS, "{tmp}/o", "--shard-size", "lots"], "not a size: 'lots'"),
    (["pack", ROWS, "{tmp}/o", "--block-size", "-1"], "not a size"),
    (["pack", ROWS, "{tmp}/o", "--level", "99"], "zstd level must be in [-7, 22], got 99"),
    (["pack", ROWS, "{tmp}/o", "--level", "three"], "expected an integer, got 'three'"),
    (["pack", ROWS, "{tmp}/o", "--metadata", "foo"], "--metadata: expected KEY=VALUE, got 'foo'"),
    (["pack", ROWS, "{tmp}/o", "--metadata", "=1"], "expected KEY=VALUE"),
    (["pack", ROWS, "{tmp}/o", "--metadata", "k=caf\udcff"], "k=caf\\xff is not valid UTF-8"),
    (["pack", ROWS, "{tmp}/o", "--storage-option", "foo"], "--storage-option: expected KEY=VALUE"),
    (["pack", ROWS, "{tmp}/o", "--workers", "-2"], "--workers: expected an integer >= 0, got -2"),
    (["pack", ROWS, "{tmp}/o", "--format", "csv"], "invalid choice: 'csv'"),
    (["pack", "{tmp}/missing", "{tmp}/o"], "missing: no such file or folder"),
    (["pack", ROWS], "required: out"),
    (["verify", SHARD], "is a shard file, not a dataset"),
    (["verify", ROWS], "is a file, not a dataset"),
    (["verify", DATASET, "--workers", "0"], "--workers: expected an integer >= 1, got 0"),
    (["verify", DATASET, "--storage-option", "endpoint_url"], "expected KEY=VALUE"),
    (["info", SHARD], "is a shard file, not a dataset"),
    (["head", DATASET, "-n", "-1"], "-n: expected an integer >= 0, got -1"),
    (["head", DATASET, "-n", "many"], "expected an integer, got 'many'"),
    (["plan", DATASET, "--batch-size", "0"], "--batch-size: expected an integer >= 1, got 0"),
    (["plan", DATASET, "--batch-size", "4", "--world-size", "0"], "--world-size"),
    (["plan", DATASET, "--batch-size", "4", "--tail", "wrap"], "invalid choice: 'wrap'"),
    (["plan", DATASET], "required: --batch-size"),
    (["plan", SHARD, "--batch-size", "4"], "is a shard file"),
    (["bench", DATASET, "--step-time", "soon"], "not a duration: 'soon'"),
    (["bench", DATASET, "--workers", "-1"], "--workers: expected an integer >= 0, got -1"),
    (["bench", DATASET, "--batch-size", "0"], "--batch-size"),
    (["cache", "warm", DATASET, "--cache-limit", "lots"], "not a size: 'lots'"),
    (["cache", "warm", DATASET, "--threads", "0"], "--threads"),
    (["cache", "warm", SHARD], "is a shard file"),
    (["cache", "clear", "--older-than", "forever"], "not a duration: 'forever'"),
    (["cache", "ls", "--color"], "unrecognized arguments: --color"),
    (["cache"], "required: ACTION"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "required: COMMAND"),
]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> str:
    """A folder with ``rows.jsonl`` and a dataset ``ds`` packed from it."""
    folder = tmp_path_factory.mktemp("usage")
    (folder / "rows.jsonl").write_bytes(b"".join(json.dumps({"i": i}).encode() + b"\n" for i in range(8)))
    run(["pack", str(folder / "rows.jsonl"), str(folder / "ds"), "--no-progress"], check=True)
    return str(folder)


def run(argv: list[str], check: bool = False, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([SHARDKIT, *argv], capture_output=True, check=check, timeout=120, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize(("argv", "message"), BAD_ARGUMENTS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_usage_error_exits_2_with_one_line(tmp, argv, message):
    got = run([part.format(tmp=tmp) for part in argv])
    stderr = got.stderr.decode()
    assert got.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), stderr
    assert message in stderr and "error:" in stderr
    assert got.stdout == b""


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["cache", "ls", "--json", "--cache-dir", "{tmp}/cache"],
                                  ["info", DATASET, "--json"], ["head", DATASET, "-n", "8"]])
def test_closed_output_pipe_ends_quietly(tmp, argv):
    """``shardkit … | head`` where head has already exited: no traceback, no 'Exception
    ignored', exit 141 (as if ended by SIGPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte
    try:
        got = subprocess.run([SHARDKIT, *[p.format(tmp=tmp) for p in argv]], stdout=write_end,
                             stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert got.returncode == 141, got.stderr.decode()
    assert got.stderr == b""
