"""G6 in docs/guarantees.md under real preemption: ``examples/train_ddp.py`` under ``torchrun``, SIGKILLed as a whole
job (torchrun, every rank, every DataLoader worker) at chosen points, restarted with
``--resume`` — sometimes on another ``--nproc_per_node`` / ``--workers`` / ``--batch-size`` — and
audited with ``tools/audit.py``: every sample of every epoch trained exactly once.

Kill points are reached by polling the run's own files (audit lines, the ``latest`` checkpoint
pointer), never by sleeping: during the first batch, mid-epoch, right after a checkpoint, at an
epoch boundary. ``--tail pad`` makes "exactly once" exact; the ``drop`` case compares with the
uninterrupted plan's multiset. No timing is asserted; HANG_S only bounds a wait.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import shardkit as sk
from tests.helpers.resume import DataSpec, Shape, consumer_batches, plan_of, real_ids
from tests.helpers.trainer_jobs import JOB_ENV, end_hung_job, kill_job, load_audit, shardkit_audit, tail, wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
NUM_SAMPLES = 1001
NUM_EPOCHS = 2
CKPT_EVERY = 4
SHUFFLE_WINDOW = 32
HANG_S = 150  # bound on any wait for a launch; never a timing assertion


@dataclass(frozen=True)
class Launch:
    nproc: int
    workers: int
    batch_size: int


@dataclass
class Job:
    """One training job's folders; launches share them like restarts of a real job."""

    data: str
    root: Path
    tail: str = "pad"
    launches: int = 0

    @property
    def ckpt(self) -> Path:
        return self.root / "ckpt"

    @property
    def audit(self) -> Path:
        return self.root / "audit"

    def start(self, launch: Launch, max_steps: int | None = None) -> subprocess.Popen[bytes]:
        """``torchrun`` in its own session; ``--resume`` from the second launch on."""
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={launch.nproc}", str(REPO / "examples" / "train_ddp.py"),
               "--data", self.data, "--workers", str(launch.workers),
               "--batch-size", str(launch.batch_size), "--epochs", str(NUM_EPOCHS),
               "--tail", self.tail, "--shuffle-window", str(SHUFFLE_WINDOW),
               "--ckpt-dir", str(self.ckpt), "--ckpt-every", str(CKPT_EVERY),
               "--audit-dir", str(self.audit), "--step-sleep", "0.01"]
        if self.launches > 0:
            cmd.append("--resume")
        if max_steps is not None:
            cmd += ["--max-steps", str(max_steps)]
        env = {**os.environ, **JOB_ENV}
        with open(self.root / f"launch{self.launches}.log", "wb") as log:
            self.launches += 1
            return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def log_path(self, number: int) -> Path:
        return self.root / f"launch{number}.log"

    def log(self, number: int) -> str:
        return tail(self.log_path(number))

    # ---- what the job has written so far ----------------------------------------------------
    def latest_step(self) -> int:
        try:
            return int((self.ckpt / "latest").read_text().strip().split("-")[1])
        except (FileNotFoundError, IndexError, ValueError):
            return 0

    def latest_meta(self) -> dict[str, Any] | None:
        try:
            name = (self.ckpt / "latest").read_text().strip()
            return json.loads((self.ckpt / name / "meta.json").read_text())
        except FileNotFoundError:
            return None

    def last_audit_step(self, run: int) -> int:
        path = self.audit / f"run{run:03d}-rank0.jsonl"
        try:
            lines = [line for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]
        except FileNotFoundError:
            return 0
        return json.loads(lines[-1])["step"] if lines else 0

    def run_started(self, run: int) -> bool:
        return (self.audit / f"run{run:03d}.json").exists()


def steps_to_epoch_end(job: Job, launch: Launch, resumed: dict[str, Any] | None) -> tuple[int, int]:
    """(epoch, global step at which it ends) for the epoch a launch starts in."""
    dataset = sk.StreamingDataset(job.data, batch_size=launch.batch_size, seed=0, tail=job.tail,
                                  shuffle_window=SHUFFLE_WINDOW)
    if resumed is None:
        return 0, dataset.num_batches(0, 0, launch.nproc, launch.workers)
    state = resumed["loader"]
    epoch = int(state["epoch"])
    left = dataset.num_batches(epoch, 0, launch.nproc, launch.workers, state["plan"])
    return epoch, resumed["global_step"] + left


def kill_at(job: Job, launch: Launch, kind: str, extra: int) -> None:
    """Start launch ``job.launches`` (run number == launch number, see below) and SIGKILL it at
    ``kind``. Except for a first-batch kill of the first launch, the kill waits for the
    launch's own first checkpoint: restarting twice from one checkpoint reuses a run number in
    train_ddp.py (see test_audit_run_numbers_after_two_restarts_from_one_checkpoint)."""
    number = job.launches
    resumed = job.latest_meta()
    start_step = resumed["global_step"] if resumed else 0
    proc = job.start(launch)
    if kind == "first-batch":
        assert number == 0
        wait_for(proc, lambda: job.run_started(number), "its first batch", job.log_path(number))
    else:
        own_ckpt = (start_step // CKPT_EVERY + 1) * CKPT_EVERY
        epoch, epoch_end = steps_to_epoch_end(job, launch, resumed)
        if kind == "after-checkpoint":
            target = own_ckpt + CKPT_EVERY * (extra % 3)
            wait_for(proc, lambda: job.latest_step() >= target, f"checkpoint {target}", job.log_path(number))
        else:
            target = epoch_end if kind == "epoch-boundary" else own_ckpt + extra
            if kind == "epoch-boundary":
                assert epoch_end >= own_ckpt, f"epoch {epoch} ends before the launch's first checkpoint"
            wait_for(proc, lambda: job.latest_step() >= own_ckpt and job.last_audit_step(number) >= target,
                     f"{kind} step {target}", job.log_path(number))
    kill_job(proc)


def finish(job: Job, launch: Launch) -> None:
    number = job.launches
    proc = job.start(launch)
    try:
        code = proc.wait(HANG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"launch {number} hung:\n{end_hung_job(proc, job.log_path(number))}")
    assert code == 0, job.log(number)
    assert "rank 0 done" in job.log(number)


def check_audit(job: Job) -> dict[str, Any]:
    """tools/audit.py: each epoch exactly once; committed steps equal across ranks (G3)."""
    report = load_audit().audit(str(job.audit), NUM_SAMPLES, NUM_EPOCHS)
    assert report["ok"], json.dumps(report, indent=1)
    for epoch in report["epochs"]:
        assert epoch["samples"] == epoch["distinct"] == NUM_SAMPLES
    for run, ranks in report["steps_per_rank"].items():
        assert len(set(ranks.values())) == 1, f"{run}: committed steps per rank {ranks}"
    return report


TOPOLOGIES = [Launch(1, 0, 8), Launch(1, 2, 8), Launch(2, 1, 8), Launch(2, 2, 8), Launch(3, 1, 6),
              Launch(2, 0, 10)]


@settings(max_examples=2, deadline=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    first=st.sampled_from(TOPOLOGIES[2:]),
    first_kill=st.sampled_from(["first-batch", "mid-epoch", "after-checkpoint", "epoch-boundary"]),
    second=st.sampled_from(TOPOLOGIES),
    second_kill=st.sampled_from(["mid-epoch", "after-checkpoint"]),
    third=st.sampled_from(TOPOLOGIES),
    extra=st.integers(1, 11),
)
def test_sigkill_and_resume_trains_every_sample_once(
    uneven_dataset: str, tmp_path_factory: pytest.TempPathFactory, first: Launch, first_kill: str,
    second: Launch, second_kill: str, third: Launch, extra: int,
) -> None:
    """G6: kill -9 twice at chosen points, resume on possibly other topologies (elastic),
    finish; every sample of both epochs trained exactly once (pad tail)."""
    job = Job(uneven_dataset, tmp_path_factory.mktemp("sigkill"))
    kill_at(job, first, first_kill, extra)
    kill_at(job, second, second_kill, extra)
    finish(job, third)
    check_audit(job)


def test_sigkill_at_an_epoch_boundary_with_drop_tail(uneven_dataset: str, tmp_path: Path) -> None:
    """G6 with ``tail="drop"``, same topology: the trained multiset of each epoch equals the
    uninterrupted run's (its plan), killed at the end of epoch 0."""
    job = Job(uneven_dataset, tmp_path, tail="drop")
    launch = Launch(2, 2, 8)
    kill_at(job, launch, "epoch-boundary", 0)
    finish(job, launch)
    lines = load_audit().committed_steps(str(job.audit))
    data = DataSpec(uneven_dataset, NUM_SAMPLES, seed=0, tail="drop", shuffle_window=SHUFFLE_WINDOW)
    for epoch in range(NUM_EPOCHS):
        trained = collections.Counter(i for line in lines if line["epoch"] == epoch for i in line["ids"])
        plan = plan_of(data, Shape(2, 2, 8), epoch, None)
        want = collections.Counter(i for c in range(plan.num_consumers)
                                   for i in real_ids(consumer_batches(plan, c)))
        assert trained == want, f"epoch {epoch}: trained multiset differs from the uninterrupted run's"


def test_audit_run_numbers_after_two_restarts_from_one_checkpoint(uneven_dataset: str,
                                                                  tmp_path: Path) -> None:
    """Two launches with ``--resume`` and no checkpoint between them: the first stops (as a
    kill would) after 2 steps without checkpointing; the audit must not count them."""
    job = Job(uneven_dataset, tmp_path)
    job.launches = 1  # both launches pass --resume; no checkpoint exists yet
    launch = Launch(1, 0, 8)
    for max_steps in (2, 3):  # 2 < CKPT_EVERY: the first stops before any checkpoint
        proc = job.start(launch, max_steps=max_steps)
        assert proc.wait(HANG_S) == 0, job.log(job.launches - 1)
    lines = load_audit().committed_steps(str(job.audit))
    steps = collections.Counter((line["epoch"], line["step"]) for line in lines)
    assert max(steps.values()) == 1, f"steps counted twice as trained: {steps}"


def test_audit_accounts_for_planned_drops_after_an_elastic_resume(uneven_dataset: str, tmp_path: Path) -> None:
    """The README's resume recipe with the default ``tail="drop"``: killed mid-epoch on 2 ranks
    x 2 workers, resumed on 3 ranks x 1 worker with another batch size; ``shardkit audit`` (as a
    user runs it) exits 0: the samples missing are exactly the drops of each epoch's last plan
    (R3), which the loader's audit sink (``audit_dir=``, R15) recorded on rank 0."""
    job = Job(uneven_dataset, tmp_path, tail="drop")
    kill_at(job, Launch(2, 2, 8), "mid-epoch", 3)
    finish(job, Launch(3, 1, 6))
    assert json.loads((job.audit / "run001.json").read_text())["resumed_from_step"] > 0  # the kill cost steps
    text = shardkit_audit(job.audit, "--data", uneven_dataset, "--epochs", NUM_EPOCHS)
    assert text.returncode == 0 and "AUDIT OK" in text.stdout, text.stdout + text.stderr
    done = shardkit_audit(job.audit, "--data", uneven_dataset, "--epochs", NUM_EPOCHS, "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["ok"], done.stdout
    assert all(e["planned_drops"] > 0 for e in report["epochs"]), report["epochs"]
    for epoch in report["epochs"]:
        assert epoch["distinct"] + epoch["planned_drops"] == NUM_SAMPLES
