"""A weighted run on the real stack (specs/sample-weights.md SW4, SW7): ``examples/train_ddp.py``
with ``--sample-weights`` under ``torchrun``, 2 ranks streaming from the local S3 server through
the node cache, SIGKILLed mid-epoch as a whole job, resumed on the same topology, SIGKILLed
again, resumed elastically (1 rank, 2 DataLoader workers, another batch size), and audited with
``tools/audit.py --sample-weights``: every sample of both epochs trained exactly ``m_j`` times.

Kill points are reached by polling the run's own files (audit lines, the ``latest`` pointer),
never by sleeping; HANG_S in trainer_jobs only bounds a wait.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from tests.helpers.s3 import CREDENTIALS
from tests.helpers.trainer_jobs import (
    HANG_S,
    REPO,
    end_hung_job,
    kill_job,
    last_audit_step,
    load_audit,
    start_job,
    tail,
    wait_for,
)

pytestmark = [pytest.mark.s3, pytest.mark.slow]

NUM_SAMPLES, EPOCH_SIZE, EPOCHS, SEED, CKPT_EVERY = 240, 320, 2, 4, 4


@pytest.fixture
def weighted_s3(s3_bucket: tuple[str, dict[str, Any]]) -> str:
    """240 samples in small shards with a skewed ``weight`` field (some 0, some 4x)."""
    url = f"{s3_bucket[0]}/weighted"
    with sk.ShardWriter(url, shard_size="2KiB", block_size="512B", storage_options=s3_bucket[1]) as writer:
        for i in range(NUM_SAMPLES):
            weight = 0.0 if i % 11 == 0 else (4.0 if i % 7 == 0 else 1.0)
            writer.write({"id": i, "weight": weight, "x": np.full(8, i, dtype=np.int32)})
    return url


def launch(root: Path, data: str, endpoint: str, number: int, nproc: int, workers: int, batch: int) -> Any:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(REPO / "examples" / "train_ddp.py"), "--data", data, "--endpoint-url", endpoint,
           "--cache-dir", str(root / "cache"), "--sample-weights", "weight",
           "--samples-per-epoch", str(EPOCH_SIZE), "--seed", str(SEED), "--epochs", str(EPOCHS),
           "--workers", str(workers), "--batch-size", str(batch), "--tail", "pad", "--shuffle-window", "32",
           "--ckpt-dir", str(root / "ckpt"), "--ckpt-every", str(CKPT_EVERY), "--audit-dir", str(root / "audit"),
           "--step-sleep", "0.01"] + (["--resume"] if number else [])
    return start_job(cmd, root / f"launch{number}.log", AWS_ACCESS_KEY_ID=CREDENTIALS["key"],
                     AWS_SECRET_ACCESS_KEY=CREDENTIALS["secret"], AWS_DEFAULT_REGION="us-east-1")


def latest(root: Path) -> dict[str, Any] | None:
    try:
        name = (root / "ckpt" / "latest").read_text().strip()
        return dict(json.loads((root / "ckpt" / name / "meta.json").read_text()))
    except (FileNotFoundError, NotADirectoryError):
        return None


def kill_after(root: Path, proc: Any, number: int, epoch: int, steps: int) -> None:
    """SIGKILL launch ``number`` once it checkpointed in ``epoch`` and trained ``steps`` more
    steps after that checkpoint (mid-epoch, between checkpoints when steps % CKPT_EVERY)."""
    def ready() -> bool:
        meta = latest(root)
        return (meta is not None and meta["run"] == number and meta["epoch"] >= epoch
                and last_audit_step(root / "audit", number) >= meta["global_step"] + steps)
    wait_for(proc, ready, f"epoch {epoch} checkpoint + {steps} steps", root / f"launch{number}.log")
    kill_job(proc)


def test_a_weighted_run_from_s3_survives_sigkill_and_elastic_resume(
        weighted_s3: str, s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    """SW4 + SW7 under preemption: kill -9 mid-epoch 0 (2 ranks x 1 worker, batch 8), resume on
    the same topology and kill -9 again in epoch 1, finish on 1 rank x 2 workers with batch 6;
    tools/audit.py --sample-weights: each sample exactly m_j times per epoch (pad tail)."""
    endpoint = s3_bucket[1]["client_kwargs"]["endpoint_url"]
    kill_after(tmp_path, launch(tmp_path, weighted_s3, endpoint, 0, 2, 1, 8), 0, 0, 2)
    kill_after(tmp_path, launch(tmp_path, weighted_s3, endpoint, 1, 2, 1, 8), 1, 1, 1)
    last = launch(tmp_path, weighted_s3, endpoint, 2, 1, 2, 6)
    try:
        code = last.wait(HANG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the elastic launch hung:\n{end_hung_job(last, tmp_path / 'launch2.log')}")
    assert code == 0, tail(tmp_path / "launch2.log")
    tool = load_audit()
    expected = tool.weighted_multiplicities(weighted_s3, "weight", EPOCH_SIZE, SEED, s3_bucket[1])
    assert any(expected(0) == 0) and any(expected(0) > 1)
    report = tool.audit(str(tmp_path / "audit"), NUM_SAMPLES, EPOCHS, expected)
    assert report["ok"], json.dumps(report, indent=1)
    assert [e["samples"] for e in report["epochs"]] == [EPOCH_SIZE] * EPOCHS
    assert sorted(report["steps_per_rank"]) == ["run0", "run1", "run2"]
    assert not tool.audit(str(tmp_path / "audit"), NUM_SAMPLES, EPOCHS)["ok"]  # not "each sample once"
