"""``shardkit.loader.lightning`` under real Lightning: DDP on CPU (gloo, 2 processes launched by
Lightning itself), SIGKILLed as a whole job mid-epoch twice (once in each epoch), resumed from
the Lightning checkpoint each time, and audited with ``tools/audit.py``: every sample of both
epochs trained exactly once, and the second epoch in a new order.

The kill waits (by polling the job's files, never by sleeping) for a checkpoint and then for two
more trained steps, so the kill always loses trained-but-uncheckpointed steps, which the resumed
run must train again, and Lightning's fetched-ahead batch, which it must not skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.datasets import write_dataset

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
SCRIPT = Path(__file__).resolve().parent / "lightning_train.py"
SHARD_SIZES = (60, 80, 60)  # 200 samples: 25 steps per epoch per rank at batch 4, 2 ranks
STEPS_PER_EPOCH = 25
HANG_S = 300  # bound on any wait; never a timing assertion


def load_audit() -> Any:
    spec = importlib.util.spec_from_file_location("shardkit_audit_tool", REPO / "tools" / "audit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LightningJob:
    def __init__(self, root: Path, data: str) -> None:
        self.root, self.data, self.runs = root, data, 0
        self.ckpt, self.audit = root / "ckpt", root / "audit"
        self.audit.mkdir(parents=True)

    def latest_checkpoint(self) -> tuple[int, Path | None]:
        found = [(int(m.group(1)), p) for p in self.ckpt.glob("*.ckpt")
                 if (m := re.match(r"step=(\d+)\.ckpt$", p.name))]
        return max(found) if found else (0, None)

    def start(self) -> subprocess.Popen[bytes]:
        run = self.runs
        step, path = self.latest_checkpoint()
        (self.audit / f"run{run:03d}.json").write_text(json.dumps({"resumed_from_step": step}))
        cmd = [sys.executable, str(SCRIPT), "--data", self.data, "--ckpt-dir", str(self.ckpt),
               "--audit-dir", str(self.audit), "--run", str(run)]
        if path is not None:
            cmd += ["--ckpt", str(path)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        with open(self.root / f"run{run}.log", "wb") as log:
            self.runs += 1
            return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def log(self, run: int) -> str:
        return (self.root / f"run{run}.log").read_text(errors="replace")[-4000:]

    def last_step(self, run: int) -> int:
        path = self.audit / f"run{run:03d}-rank0.jsonl"
        lines = [x for x in path.read_text().splitlines(keepends=True) if x.endswith("\n")] if path.exists() else []
        return json.loads(lines[-1])["step"] if lines else 0


def wait_for(job: LightningJob, proc: subprocess.Popen[bytes], run: int, ready: Any, what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"run {run} exited ({proc.returncode}) before {what}:\n{job.log(run)}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"run {run} never reached {what}:\n{job.log(run)}")
        time.sleep(0.01)


def kill_after_checkpoint(job: LightningJob, at_least: int) -> None:
    """Run until a checkpoint at step >= ``at_least`` and two trained steps beyond it; SIGKILL
    the job's whole process group (Lightning's launcher, the second rank, loader workers)."""
    run = job.runs
    proc = job.start()
    wait_for(job, proc, run, lambda: job.latest_checkpoint()[0] >= at_least, f"a checkpoint at step {at_least}")
    saved = job.latest_checkpoint()[0]
    wait_for(job, proc, run, lambda: job.last_step(run) >= saved + 2, f"step {saved + 2}")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(HANG_S)


def test_lightning_ddp_killed_twice_trains_every_sample_once_per_epoch(tmp_path: Path) -> None:
    data = write_dataset(str(tmp_path / "data"), SHARD_SIZES)
    job = LightningJob(tmp_path / "job", data)
    kill_after_checkpoint(job, at_least=9)  # mid epoch 0
    kill_after_checkpoint(job, at_least=STEPS_PER_EPOCH + 6)  # mid epoch 1, resumed from a mid-epoch-0 checkpoint
    run = job.runs
    proc = job.start()
    assert proc.wait(HANG_S) == 0, job.log(run)

    report = load_audit().audit(str(job.audit), sum(SHARD_SIZES), 2)
    assert report["ok"], report
    assert [e["samples"] for e in report["epochs"]] == [sum(SHARD_SIZES)] * 2, report
    orders: dict[int, list[int]] = {0: [], 1: []}
    for line in load_audit().committed_steps(str(job.audit)):
        if line["rank"] == 0:
            orders[line["epoch"]] += line["ids"]
    assert orders[0] != orders[1], "epoch 1 repeated epoch 0's order"
