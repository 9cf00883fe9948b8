"""G12 under real preemption: ``examples/train_lm.py`` (a tiny GPT on token blocks) on a
3-source token mixture (weights in tokens, one source repeated within the epoch) under
``torchrun`` with 2 ranks is SIGKILLed mid-epoch, resumed on 1 rank with another ``seq_len``
and batch size (specs/token-blocks.md TB7, TB8, TB15), and ``tools/audit_tokens.py`` proves
that every (document, position) of the epoch multiset was trained exactly once, per source."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers.token_data import write_token_dataset, write_token_mixture_file
from tests.helpers.trainer_jobs import HANG_S, REPO, kill_job, last_audit_step, load_audit, start_job, tail, wait_for

pytestmark = pytest.mark.slow
LENGTHS = [(i * 37) % 61 for i in range(120)]  # 0 … 60 tokens, empty documents included
SOURCES = [(LENGTHS[:70], 0.6), (LENGTHS[70:110], 0.3), (LENGTHS[110:], 0.1)]  # s0, s1, s2 (s2 repeats)


def _cmd(data: str, root: Path, nproc: int, workers: int, seq_len: int, batch: int, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(REPO / "examples" / "train_lm.py"), "--data", data, "--workers", str(workers),
           "--seq-len", str(seq_len), "--batch-size", str(batch), "--ckpt-dir", str(root / "ckpt"),
           "--ckpt-every", "3", "--audit-dir", str(root / "audit"), "--step-sleep", "0.05"]
    return cmd + (["--resume"] if resume else [])


def _mixture_file(root: Path) -> str:
    return write_token_mixture_file(str(root), SOURCES, samples_per_epoch=120)


def test_killed_lm_run_on_a_mixture_resumed_elastically_trains_every_token_once(tmp_path):
    data = _mixture_file(tmp_path / "data")
    first_log, second_log = tmp_path / "launch0.log", tmp_path / "launch1.log"
    job = start_job(_cmd(data, tmp_path, 2, 1, 16, 2, resume=False), first_log)
    wait_for(job, lambda: last_audit_step(tmp_path / "audit", 0) >= 8, "step 8", first_log)
    kill_job(job)  # SIGKILL mid-epoch, after the checkpoint of step 6
    job = start_job(_cmd(data, tmp_path, 1, 0, 24, 3, resume=True), second_log)
    assert job.wait(HANG_S) == 0, tail(second_log)
    resumed = json.loads((tmp_path / "audit" / "run001.json").read_text())
    assert resumed["resumed_from_step"] >= 6 and resumed["world_size"] == 1
    report = load_audit("audit_tokens").audit(str(tmp_path / "audit"), data, 1)
    assert report["ok"], report
    per_source = report["epochs"][0]["sources"]
    assert sorted(per_source) == ["s0", "s1", "s2"]
    assert all(s["pairs"] == s["expected"] == s["logged"] > 0 for s in per_source.values()), per_source
    assert per_source["s2"]["expected"] > sum(n + 1 for n in LENGTHS[110:] if n)  # s2 repeats in the epoch
    assert "per source" in second_log.read_text()


def test_lm_run_on_one_token_dataset_trains_every_token_once(tmp_path):
    """The single-dataset path of the example (a folder, not a mixture file): one rank, two
    workers, run to the end; the audit finds every position of the epoch exactly once."""
    data = write_token_dataset(str(tmp_path / "data"), LENGTHS)
    log = tmp_path / "launch0.log"
    job = start_job(_cmd(data, tmp_path, 1, 2, 16, 2, resume=False), log)
    assert job.wait(HANG_S) == 0, tail(log)
    report = load_audit("audit_tokens").audit(str(tmp_path / "audit"), data, 1)
    assert report["ok"], report
    epoch = report["epochs"][0]
    assert epoch["pairs"] == epoch["expected"] == sum(n + 1 for n in LENGTHS if n), epoch  # + EOS each
