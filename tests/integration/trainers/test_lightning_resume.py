"""``shardkit.loader.lightning`` under real Lightning: DDP on CPU (gloo, 2 processes launched by
Lightning itself), SIGKILLed as a whole job mid-epoch twice (once in each epoch), resumed from
the Lightning checkpoint each time, and audited with ``tools/audit.py``: every sample of both
epochs trained exactly once, and the second epoch in a new order.

The kill waits (by polling the job's files, never by sleeping) for a checkpoint and then for two
more trained steps, so the kill always loses trained-but-uncheckpointed steps, which the resumed
run must train again, and Lightning's fetched-ahead batch, which it must not skip.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import trainer_jobs as jobs
from tests.helpers.datasets import write_dataset

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "lightning_train.py"
SHARD_SIZES = (60, 80, 60)  # 200 samples: 25 steps per epoch per rank at batch 4, 2 ranks
STEPS_PER_EPOCH = 25


class LightningJob:
    def __init__(self, root: Path, data: str, extra: list[str]) -> None:
        self.root, self.data, self.runs, self.extra = root, data, 0, extra
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
               "--audit-dir", str(self.audit), "--run-number", str(run), *self.extra]
        if path is not None:
            cmd += ["--ckpt", str(path)]
        self.runs += 1
        return jobs.start_job(cmd, self.log(run))

    def log(self, run: int) -> Path:
        return self.root / f"run{run}.log"


def kill_after_checkpoint(job: LightningJob, at_least: int) -> None:
    """Run until a checkpoint at step >= ``at_least`` and two trained steps beyond it; SIGKILL
    the whole job (Lightning's launcher, the second rank, loader workers)."""
    run = job.runs
    proc = job.start()
    jobs.wait_for(proc, lambda: job.latest_checkpoint()[0] >= at_least, f"a checkpoint at step {at_least}",
                  job.log(run))
    saved = job.latest_checkpoint()[0]
    jobs.wait_for(proc, lambda: jobs.last_audit_step(job.audit, run) >= saved + 2, f"step {saved + 2}", job.log(run))
    jobs.kill_job(proc)


@pytest.mark.parametrize("sized", [True, False], ids=["sized", "unsized-lookahead"])
def test_lightning_ddp_killed_twice_trains_every_sample_once_per_epoch(tmp_path: Path, sized: bool) -> None:
    """Unsized, Lightning fetches batch k+1 before batch k's hooks and checkpoint: the state saved
    must still be batch k's (the bare loader's would skip k+1 on resume)."""
    data = write_dataset(str(tmp_path / "data"), SHARD_SIZES)
    job = LightningJob(tmp_path / "job", data, [] if sized else ["--unsized"])
    kill_after_checkpoint(job, at_least=9)  # mid epoch 0
    kill_after_checkpoint(job, at_least=STEPS_PER_EPOCH + 6)  # mid epoch 1, resumed from a mid-epoch-0 checkpoint
    run = job.runs
    proc = job.start()
    assert proc.wait(jobs.HANG_S) == 0, jobs.tail(job.log(run))

    report = jobs.load_audit().audit(str(job.audit), sum(SHARD_SIZES), 2)
    assert report["ok"], report
    assert [e["samples"] for e in report["epochs"]] == [sum(SHARD_SIZES)] * 2, report
    orders = jobs.epoch_orders(job.audit, rank=0)
    assert orders[0] != orders[1], "epoch 1 repeated epoch 0's order"
