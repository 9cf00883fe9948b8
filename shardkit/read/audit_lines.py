"""The audit folder of a training run (``ShardLoader(..., audit_dir=)``, specs/resume-state.md
R15): what each rank trained, read back for ``shardkit audit``.

Files: ``runNNN.json`` per launch (``{"resumed_from_step": S, ...}``: the step count of the
state that launch resumed from, 0 for a fresh start) and ``runNNN-rankR.jsonl``, one JSON line
per batch the loop received (``{"run", "epoch", "step", "ids"}``, token runs ``"pairs"``) plus,
on rank 0, one ``"dropped"`` line per epoch iteration (the samples its plan drops, R3). Steps of
a launch after the step the next launch resumed from were lost with the kill and trained again,
so they are left out: what remains is what the model state has seen. A line cut by SIGKILL (no
newline) is skipped; in a run the sink wrote (``"writer": "shardkit.loader"``), of two lines of
one step (a look-ahead batch given back with ``loader.rewind`` and handed over again) the last
counts — other writers may log several lines per step (gradient accumulation).
"""

from __future__ import annotations

import collections
import json
import os
import re
from typing import Any

from shardkit.errors import ShardkitError

SINK_WRITER = "shardkit.loader"  # runNNN.json's "writer" when the loader's sink wrote the run (R15)
_RUN = re.compile(r"run(\d+)\.json$")
_RANK = re.compile(r"run(\d+)-rank(\d+)\.jsonl$")


class AuditDirError(ShardkitError, ValueError):
    """An audit folder that cannot be read (missing, no run files, a malformed line): exit 2."""

    exit_code = 2


def run_numbers(audit_dir: str) -> list[int]:
    """The launches recorded in ``audit_dir`` (its ``runNNN.json`` files), in order."""
    try:
        names = os.listdir(audit_dir)
    except OSError as exc:
        raise AuditDirError(f"audit folder {audit_dir}: {exc.strerror or exc}") from None
    return sorted(int(m.group(1)) for name in names if (m := _RUN.match(name)))


def run_info(audit_dir: str, run: int) -> dict[str, Any]:
    """``runNNN.json`` of launch ``run``."""
    path = os.path.join(audit_dir, f"run{run:03d}.json")
    try:
        with open(path) as fh:
            info = json.load(fh)
    except (OSError, ValueError) as exc:
        raise AuditDirError(f"{path}: unreadable run file ({exc})") from None
    if not isinstance(info, dict):
        raise AuditDirError(f"{path}: expected a JSON object, got {type(info).__name__}")
    return info


def committed_lines(audit_dir: str) -> list[dict[str, Any]]:
    """Every committed audit line, with its ``rank``: steps, and rank 0's ``"dropped"`` lines."""
    runs = run_numbers(audit_dir)
    if not runs:
        raise AuditDirError(f"audit folder {audit_dir}: no runNNN.json (not an audit folder, or nothing ran)")
    files: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
    for name in sorted(os.listdir(audit_dir)):
        if m := _RANK.match(name):
            files[int(m.group(1))].append((int(m.group(2)), os.path.join(audit_dir, name)))
    lines: list[dict[str, Any]] = []
    for n, run in enumerate(runs):
        limit = _resumed_step(audit_dir, runs[n + 1]) if n + 1 < len(runs) else None
        by_step = run_info(audit_dir, run).get("writer") == SINK_WRITER  # one line per step: the last
        for rank, path in files.get(run, []):
            kept = [{**line, "rank": rank} for line in _read(path) if limit is None or line["step"] <= limit]
            lines.extend({("dropped" in line, line["step"]): line for line in kept}.values() if by_step else kept)
    return lines


def committed_steps(audit_dir: str) -> list[dict[str, Any]]:
    """The committed step lines (``"ids"`` or ``"pairs"``: what was trained) of every run."""
    return [line for line in committed_lines(audit_dir) if "dropped" not in line]


def _resumed_step(audit_dir: str, run: int) -> int:
    step = run_info(audit_dir, run).get("resumed_from_step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise AuditDirError(f"{os.path.join(audit_dir, f'run{run:03d}.json')}: 'resumed_from_step' must be an "
                            f"int >= 0, got {step!r:.40} (a resume the audit cannot place: call "
                            f"loader.audit_resumed(step) after loading a state made without audit_dir)")
    return step


def _read(path: str) -> list[dict[str, Any]]:
    out = []
    with open(path) as fh:
        for number, raw in enumerate(fh, 1):
            if not raw.endswith("\n"):
                continue  # a line cut by SIGKILL
            try:
                line = json.loads(raw)
            except ValueError:
                raise AuditDirError(f"{path} line {number}: not JSON ({raw[:60]!r})") from None
            if not isinstance(line, dict) or not isinstance(line.get("step"), int) \
                    or not isinstance(line.get("epoch"), int):
                raise AuditDirError(f"{path} line {number}: expected an object with int 'epoch' and 'step'")
            out.append(line)
    return out


def planned_drops(lines: list[dict[str, Any]], epoch: int) -> collections.Counter[int]:
    """The samples the epoch's last plan drops (``tail="drop"``, R3): from the ``"dropped"``
    line of the last run that iterated the epoch (rank 0 writes one per epoch iteration)."""
    records = [line for line in lines if line["epoch"] == epoch and "dropped" in line]
    if not records:
        return collections.Counter()
    return collections.Counter(max(records, key=lambda line: (line["run"], line["step"]))["dropped"])
