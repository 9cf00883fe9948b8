"""G15 under real preemption: ``examples/train_hf_lm.py`` (a tiny random GPT-2 under
``transformers.Trainer`` via ``ShardkitTrainer``, token blocks, CPU, gloo) under ``torchrun``
is SIGKILLed mid-epoch and resumed on another topology; ``tools/audit_tokens.py`` then finds
every (document, position) of every epoch trained exactly once:

- 1 rank → 2 ranks (killed in epoch 0);
- 2 ranks → 1 rank with another ``seq_len`` and batch size (killed in epoch 1);
- 1 rank → 2 ranks from a checkpoint saved at the end of epoch 0;
- a 3-source token mixture, 2 ranks → 1 rank with another ``seq_len`` and batch size, and
  1 rank → 2 ranks from a checkpoint saved at the end of epoch 0.

Before G15 ``Trainer`` took the epoch as ``global_step // len(loader)`` on the new topology and
``set_epoch`` dropped the loaded state: positions were lost or trained twice. The resumed runs
also restore the optimizer on CPU under ``torchrun`` (``cpu:N`` storages, G15's CPU point).
The kill waits (polling files, never sleeping) for a complete checkpoint and two more steps.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import shardkit as sk
from tests.helpers import trainer_jobs as jobs
from tests.helpers.token_data import write_token_dataset, write_token_mixture_file

pytestmark = pytest.mark.slow
SCRIPT = jobs.REPO / "examples" / "train_hf_lm.py"
LENGTHS = [(i * 37) % 41 for i in range(40)]  # 0 … 40 tokens, empty documents included
SOURCES = [(LENGTHS[:22], 0.6), (LENGTHS[22:34], 0.3), (LENGTHS[34:], 0.1)]  # s2 repeats within the epoch
VOCAB = 40_100  # token ids 10 + 1000·s + i (tests/helpers/token_data.py)


class LMJob:
    def __init__(self, root: Path, data: str) -> None:
        self.root, self.data, self.launches = root, data, 0
        self.out, self.audit = root / "out", root / "audit"

    def complete_checkpoint(self) -> int:
        steps = [int(m.group(1)) for p in self.out.glob("checkpoint-*")
                 if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)) and (p / "trainer_state.json").exists()]
        return max(steps, default=0)

    def start(self, nproc: int, seq_len: int, batch: int, save_every: int = 4) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(SCRIPT), "--data", self.data, "--out", str(self.out), "--audit-dir", str(self.audit),
               "--seq-len", str(seq_len), "--batch-size", str(batch), "--epochs", "2", "--workers", "1",
               "--vocab", str(VOCAB), "--save-every", str(save_every), "--step-sleep", "0.08"]
        if self.launches:
            cmd.append("--resume")
        self.launches += 1
        return jobs.start_job(cmd, self.log(self.launches - 1), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

    def log(self, launch: int) -> Path:
        return self.root / f"launch{launch}.log"

    def kill_after(self, proc: subprocess.Popen[bytes], checkpoint: int) -> int:
        """SIGKILL ``proc`` once a checkpoint at step >= ``checkpoint`` is complete and two more
        steps were trained; returns that checkpoint's step."""
        log, run = self.log(self.launches - 1), self.launches - 1
        jobs.wait_for(proc, lambda: self.complete_checkpoint() >= checkpoint, f"checkpoint {checkpoint}", log)
        saved = self.complete_checkpoint()
        jobs.wait_for(proc, lambda: jobs.last_audit_step(self.audit, run) >= saved + 2, f"step {saved + 2}", log)
        assert proc.poll() is None, "the job ended before the kill"
        jobs.kill_job(proc)
        return saved

    def finish(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        assert proc.wait(jobs.HANG_S) == 0, jobs.tail(self.log(self.launches - 1))
        return jobs.load_audit("audit_tokens").audit(str(self.audit), self.data, 2)


def _steps_per_epoch(data: str, seq_len: int, batch: int, world: int) -> int:
    tokens = sk.TokenBlocks(seq_len, eos_id=2)
    ds = sk.StreamingDataset(data, batch_size=batch, tokens=tokens, tail="pad")
    return ds.num_batches(0, 0, world, 1)  # rank 0's steps in epoch 0 (every rank has as many)


def _exactly_once(report: dict[str, Any]) -> None:
    assert report["ok"], json.dumps(report)
    for epoch in report["epochs"]:
        assert epoch["pairs"] == epoch["expected"] > 0 and epoch["duplicates"] == epoch["missing"] == 0, epoch


def test_one_rank_killed_mid_epoch_resumed_on_two_trains_every_position_once(tmp_path: Path) -> None:
    data = write_token_dataset(str(tmp_path / "data"), LENGTHS)
    job = LMJob(tmp_path, data)
    per_epoch = _steps_per_epoch(data, 16, 2, 1)
    saved = job.kill_after(job.start(1, 16, 2), checkpoint=per_epoch // 2)
    assert saved < per_epoch  # killed in epoch 0
    _exactly_once(job.finish(job.start(2, 16, 2)))


def test_two_ranks_killed_in_epoch_one_resumed_on_one_with_other_seq_len_and_batch(tmp_path: Path) -> None:
    data = write_token_dataset(str(tmp_path / "data"), LENGTHS)
    job = LMJob(tmp_path, data)
    per_epoch = _steps_per_epoch(data, 16, 2, 2)
    saved = job.kill_after(job.start(2, 16, 2), checkpoint=per_epoch + 2)
    assert per_epoch < saved < 2 * per_epoch  # killed in epoch 1
    _exactly_once(job.finish(job.start(1, 24, 3)))


def test_resume_from_a_checkpoint_saved_at_an_epoch_end_on_more_ranks(tmp_path: Path) -> None:
    data = write_token_dataset(str(tmp_path / "data"), LENGTHS)
    job = LMJob(tmp_path, data)
    per_epoch = _steps_per_epoch(data, 16, 2, 1)
    saved = job.kill_after(job.start(1, 16, 2, save_every=per_epoch), checkpoint=per_epoch)
    assert saved == per_epoch  # the checkpoint of the last step of epoch 0
    _exactly_once(job.finish(job.start(2, 16, 2)))


def _mixture_file(root: Path) -> str:
    return write_token_mixture_file(str(root), SOURCES, samples_per_epoch=40)


def _exactly_once_per_source(report: dict[str, Any]) -> None:
    _exactly_once(report)
    for epoch in report["epochs"]:
        assert sorted(epoch["sources"]) == ["s0", "s1", "s2"]
        assert all(s["pairs"] == s["expected"] == s["logged"] > 0 for s in epoch["sources"].values()), epoch


def test_three_source_mixture_two_ranks_to_one_with_other_seq_len_and_batch(tmp_path: Path) -> None:
    data = _mixture_file(tmp_path / "data")
    job = LMJob(tmp_path, data)
    per_epoch = _steps_per_epoch(data, 16, 2, 2)
    saved = job.kill_after(job.start(2, 16, 2), checkpoint=per_epoch // 2)
    assert saved < per_epoch
    _exactly_once_per_source(job.finish(job.start(1, 24, 3)))


def test_three_source_mixture_from_an_epoch_end_checkpoint_on_more_ranks(tmp_path: Path) -> None:
    data = _mixture_file(tmp_path / "data")
    job = LMJob(tmp_path, data)
    per_epoch = _steps_per_epoch(data, 16, 2, 1)
    saved = job.kill_after(job.start(1, 16, 2, save_every=per_epoch), checkpoint=per_epoch)
    assert saved == per_epoch
    _exactly_once_per_source(job.finish(job.start(2, 16, 2)))
