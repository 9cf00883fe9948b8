"""A 3-source mixture streamed from a real S3 server (moto) through the cache by 2 ranks x 2
DataLoader workers (real processes, gloo), SIGKILLed mid-epoch, resumed elastically on 3 ranks x
1 worker with another batch size and *new weights*: the samples the two runs trained, per source,
are exactly the epoch's planned multiset (specs/mixture.md MX5, MX8-MX10).

The audit is the jobs' own per-step files (s3_mixture_rank.py); the kill point is reached by
polling the checkpoint file, never by sleeping. No timing is asserted; HANG_S bounds a wait.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from shardkit.plan import PlanParams
from tests.helpers.mixture_sources import SOURCES, write_sources
from tests.helpers.mixture_strategies import expected_multiset, source_of

pytestmark = [pytest.mark.s3, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]
RANK_SCRIPT = Path(__file__).with_name("s3_mixture_rank.py")
NEW_WEIGHTS = {"web": 0.2, "code": 0.2, "math": 0.6}
HANG_S = 240


@pytest.fixture
def s3_sources(s3_bucket: tuple[str, dict[str, Any]]) -> dict[str, str]:
    return write_sources(*s3_bucket)


def launch(job: Path, run: int, world: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = []
    for rank in range(world):
        with open(job.parent / f"run{run}-rank{rank}.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, str(RANK_SCRIPT), str(job), str(rank), str(world), str(run)],
                                          env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def wait_for(predicate: Any, procs: list[subprocess.Popen[bytes]], folder: Path) -> None:
    deadline = time.monotonic() + HANG_S
    while not predicate():
        failed = [p for p in procs if p.poll() not in (None, 0)]
        if failed or time.monotonic() > deadline:
            logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(folder.glob("*.log")))
            pytest.fail(f"job failed or hung:\n{logs}")
        time.sleep(0.05)


def checkpoint(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / "ckpt.json").read_text())
    except FileNotFoundError:
        return None


def audited(folder: Path, run: int, up_to: int | None) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for path in sorted(folder.glob(f"run{run}-rank*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if up_to is None or entry["step"] <= up_to:
                found += [(name, int(i)) for name, i in entry["samples"]]
    return found


def test_killed_mixture_job_resumes_elastically_with_exact_counts_per_source(
    s3_sources: dict[str, str], s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    job = tmp_path / "job.json"
    runs = [{"sources": [[n, s3_sources[n], w] for n, (_, w) in SOURCES.items()], "batch_size": 4, "workers": 2},
            {"sources": [[n, s3_sources[n], NEW_WEIGHTS[n]] for n in SOURCES], "batch_size": 3, "workers": 1}]
    job.write_text(json.dumps({"runs": runs, "samples_per_epoch": 400, "composition": "random",
                               "options": s3_bucket[1], "ckpt_every": 5, "step_sleep": 0.05}))
    first = launch(job, 0, 2)
    try:
        wait_for(lambda: (checkpoint(tmp_path) or {}).get("step", 0) >= 10, first, tmp_path)
    finally:
        for proc in first:  # the whole rank: its DataLoader workers are in its session
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not list(tmp_path.glob("run0-*.done")), "the first run ended before the kill"
    saved = checkpoint(tmp_path)
    assert saved is not None and saved["run"] == 0
    before = audited(tmp_path, 0, saved["step"])
    counted = {e["name"]: e["consumed"] for e in saved["state"]["mixture"]["sources"]}
    assert counted == dict(collections.Counter(name for name, _ in before))  # MX9: what was trained

    second = launch(job, 1, 3)
    wait_for(lambda: all(p.poll() is not None for p in second), second, tmp_path)
    assert all(p.returncode == 0 for p in second)
    after = audited(tmp_path, 1, None)

    mixture = sk.Mixture([sk.Source(s3_sources[n], w, n) for n, (_, w) in SOURCES.items()], samples_per_epoch=400)
    spec = sk.StreamingDataset(mixture, batch_size=4, storage_options=s3_bucket[1]).source.spec
    ids = list(expected_multiset(spec, PlanParams(batch_size=4, tail="pad", shuffle_window=32)).elements())
    starts = np.cumsum([0] + [s.num_samples for s in spec.sources])
    want = collections.Counter((spec.names[s], i - int(starts[s])) for s, i in zip(source_of(spec, ids), ids,
                                                                                      strict=True))
    assert collections.Counter(before + after) == want  # each element of the epoch multiset exactly once
    per_source = collections.Counter(name for name, _ in before + after)
    assert [per_source[n] for n in SOURCES] == spec.counts(0).tolist() == [240, 120, 40]
    received = [json.loads((tmp_path / f"run1-rank{r}.done").read_text()) for r in range(3)]
    assert {n: sum(r[n] for r in received) for n in SOURCES} == dict(collections.Counter(n for n, _ in after))
