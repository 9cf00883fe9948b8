"""``shardkit bench`` as a multi-rank job under torchrun (G10): every rank reads its part of
the plan, the report carries every rank's data-wait fraction and host, and one rank prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_bench_under_torchrun_reports_every_rank(uneven_dataset: str) -> None:
    bin_dir = os.path.dirname(sys.executable)
    cmd = [os.path.join(bin_dir, "torchrun"), "--standalone", "--nproc_per_node", "2", "--no-python",
           os.path.join(bin_dir, "shardkit"), "bench", uneven_dataset,
           "--workers", "0", "--steps", "5", "--batch-size", "8", "--json"]
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)  # one report: rank 0 prints, the other stays silent
    ranks = report["throughput"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["steps"] == 5 for r in ranks)
    assert all(0.0 <= r["wait_fraction"] <= 1.0 and r["host"] for r in ranks)
    assert "straggler" in report["throughput"]
