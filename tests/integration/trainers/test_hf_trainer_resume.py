"""``shardkit.loader.hf.ShardkitTrainer`` under real ``transformers`` and ``torchrun`` (CPU, gloo,
2 processes): a randomly initialised 2-layer GPT-2 trained from a ``ShardLoader``, SIGKILLed as a
whole job mid-epoch twice (once in each epoch), resumed with ``resume_from_checkpoint=True``, and
audited with ``tools/audit.py``: every sample of both epochs trained exactly once, the second
epoch in a new order. ``hf_train.py``'s forward hook fails the run if a batch reaches
``model.forward`` with other keys than the collation made, another shape or other rows.

The kill waits (polling the job's files, never sleeping) for a complete checkpoint and two more
trained steps, so every kill loses trained-but-uncheckpointed steps that the resumed run must
train again, without skipping any.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardkit as sk
from tests.helpers import trainer_jobs as jobs

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "hf_train.py"
NUM_SAMPLES = 200  # 25 steps per epoch per rank at batch 4, 2 ranks: nothing dropped
STEPS_PER_EPOCH = 25
SEQ, VOCAB = 8, 128  # as in hf_train.py


def write_token_dataset(root: str) -> str:
    with sk.ShardWriter(root, shard_size=2048) as writer:
        for sample_id in range(NUM_SAMPLES):
            rest = [(sample_id * (k + 3)) % VOCAB for k in range(SEQ - 2)]
            writer.write({"tokens": np.array([sample_id // VOCAB, sample_id % VOCAB, *rest], dtype=np.int64)})
    return root


class HFJob:
    def __init__(self, root: Path, data: str) -> None:
        self.root, self.data, self.runs = root, data, 0
        self.out, self.audit = root / "out", root / "audit"
        self.audit.mkdir(parents=True)

    def latest_checkpoint(self) -> int:
        """The newest step whose checkpoint folder is complete (``trainer_state.json`` comes last)."""
        steps = [int(m.group(1)) for p in self.out.glob("checkpoint-*")
                 if (m := re.match(r"checkpoint-(\d+)$", p.name)) and (p / "trainer_state.json").exists()]
        return max(steps, default=0)

    def start(self) -> subprocess.Popen[bytes]:
        run = self.runs
        step = self.latest_checkpoint()
        (self.audit / f"run{run:03d}.json").write_text(json.dumps({"resumed_from_step": step}))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
               "--data", self.data, "--out", str(self.out), "--audit-dir", str(self.audit),
               "--run-number", str(run)]
        if step:
            cmd.append("--resume")
        self.runs += 1
        return jobs.start_job(cmd, self.log(run), HF_HUB_OFFLINE="1")

    def log(self, run: int) -> Path:
        return self.root / f"run{run}.log"


def kill_after_checkpoint(job: HFJob, at_least: int) -> None:
    run = job.runs
    proc = job.start()
    jobs.wait_for(proc, lambda: job.latest_checkpoint() >= at_least, f"a checkpoint at step {at_least}", job.log(run))
    saved = job.latest_checkpoint()
    jobs.wait_for(proc, lambda: jobs.last_audit_step(job.audit, run) >= saved + 2, f"step {saved + 2}", job.log(run))
    jobs.kill_job(proc)


def test_hf_trainer_torchrun_killed_twice_trains_every_sample_once_per_epoch(tmp_path: Path) -> None:
    data = write_token_dataset(str(tmp_path / "data"))
    job = HFJob(tmp_path / "job", data)
    kill_after_checkpoint(job, at_least=9)  # mid epoch 0
    kill_after_checkpoint(job, at_least=STEPS_PER_EPOCH + 6)  # mid epoch 1
    run = job.runs
    proc = job.start()
    assert proc.wait(jobs.HANG_S) == 0, jobs.tail(job.log(run))

    report = jobs.load_audit().audit(str(job.audit), NUM_SAMPLES, 2)
    assert report["ok"], report
    assert [e["samples"] for e in report["epochs"]] == [NUM_SAMPLES] * 2, report
    assert set(report["steps_per_rank"]) == {"run0", "run1", "run2"}, report
    orders = jobs.epoch_orders(job.audit, rank=0)
    assert orders[0] != orders[1], "epoch 1 repeated epoch 0's order"
