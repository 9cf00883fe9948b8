"""Launching, watching and SIGKILLing the trainer jobs of tests/integration/trainers/.

A job is one launcher process (Lightning's own, or ``torchrun``) started in its own session; its
ranks may lead sessions of their own (``torchrun`` starts them that way), so a kill walks the
process tree and kills every group in it at once, as a preempted machine would.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HANG_S = 300  # bound on any wait; never a timing assertion
# One thread per rank; a hung job's processes print their stacks when sent SIGABRT (end_hung_job).
JOB_ENV = {"OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}


def load_audit(tool: str = "audit") -> Any:
    """``tools/<tool>.py`` (``audit``, ``audit_tokens``) as a module (a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location(f"shardkit_{tool}_tool", REPO / "tools" / f"{tool}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shardkit_audit(*args: str) -> subprocess.CompletedProcess[str]:
    """``shardkit audit ARGS`` as a user runs it (a fresh process), its output captured."""
    cli = "import sys; from shardkit.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", cli, "audit", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=HANG_S, check=False)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_job(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the launcher, every process below it and their groups; wait until all are gone."""
    pids = descendants(proc.pid)
    for pid in [proc.pid, *pids]:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    proc.wait(HANG_S)
    deadline = time.monotonic() + HANG_S
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, "killed processes did not go away"
        time.sleep(0.01)


def end_hung_job(proc: subprocess.Popen[bytes], log: Path) -> str:
    """A job that stopped making progress: every process below the launcher is sent SIGABRT
    first, so each prints every thread's stack into ``log`` (``PYTHONFAULTHANDLER=1``, set by
    :func:`start_job`), then the whole job is SIGKILLed; returns the end of the log."""
    pids = descendants(proc.pid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGABRT)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 30  # the dumps are written at once; bound the wait for them
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    kill_job(proc)
    return tail(log, 30000)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(proc: subprocess.Popen[bytes], ready: Any, what: str, log: Path) -> None:
    """Poll ``ready()``; fail with the job's log if the job exits first or never gets there."""
    deadline = time.monotonic() + HANG_S
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"job exited ({proc.returncode}) before {what}:\n{tail(log)}")
        if time.monotonic() > deadline:
            pytest.fail(f"job never reached {what}:\n{end_hung_job(proc, log)}")
        time.sleep(0.01)


def tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


def last_audit_step(audit_dir: Path, run: int) -> int:
    """The step of rank 0's last complete audit line of ``run`` (0 if none yet)."""
    path = audit_dir / f"run{run:03d}-rank0.jsonl"
    lines = [x for x in path.read_text().splitlines(keepends=True) if x.endswith("\n")] if path.exists() else []
    return int(json.loads(lines[-1])["step"]) if lines else 0


def epoch_orders(audit_dir: Path, rank: int) -> dict[int, list[int]]:
    """The ids ``rank`` trained per epoch, in order, counting only steps kept by checkpoints."""
    orders: dict[int, list[int]] = collections.defaultdict(list)
    for line in load_audit().committed_steps(str(audit_dir)):
        if line["rank"] == rank:
            orders[line["epoch"]] += line["ids"]
    return dict(orders)


def start_job(cmd: list[str], log: Path, **env: str) -> subprocess.Popen[bytes]:
    """Start a job in its own session, its output in ``log``, with ``env`` added to the
    environment (one thread per rank, the repository importable)."""
    full_env = {**os.environ, **JOB_ENV, "PYTHONPATH": str(REPO), **env}
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
