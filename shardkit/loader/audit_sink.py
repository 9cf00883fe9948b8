"""The audit sink of ``ShardLoader(..., audit_dir=)`` (specs/resume-state.md R15): what each rank
trained, in the folder ``shardkit audit`` reads (read/audit_lines.py).

Per launch (process group) the first ``iter(loader)`` picks the run number — one more than the
highest ``runNNN.json`` in the folder, agreed by all processes (collective when distributed) —
and rank 0 writes ``runNNN.json``: ``resumed_from_step`` (the step count of the state this
launch loaded, 0 for a fresh start), the topology and, for token blocks, the token settings.
Each rank appends to ``runNNN-rankR.jsonl`` one line per batch handed to the training loop
(the consumed boundary), ``{"run", "epoch", "step", "ids"}`` (``_index`` without ``_padded``
rows; token blocks: ``"pairs"`` of document and position), line-buffered so a SIGKILL loses at
most a partial line; rank 0 adds one ``"dropped"`` line per epoch iteration (R3). ``step``
counts the batches of the whole run, across epochs and launches: ``state_dict()`` records it
(``"audit_step"``) and ``load_state_dict()`` continues from it, so the audit knows which steps
of a killed launch its successor trained again. Only one replica of each data-parallel rank
writes (P22). The folder must be shared by all ranks (one file per rank, one writer each).
"""

from __future__ import annotations

import json
import os
import re
import weakref
from typing import Any

import torch
import torch.distributed as dist

from shardkit.errors import StateError
from shardkit.loader.collectives import all_gather_ints

AUDIT_STEP_KEY = "audit_step"  # the run's step count in a loader state saved with a sink
_RUN = re.compile(r"run(\d+)\.json$")


class AuditSink:
    """The lines of one process; ``start`` at the first ``iter(loader)``, then ``batch`` per batch."""

    def __init__(self, audit_dir: str | os.PathLike[str]) -> None:
        self.audit_dir = os.fspath(audit_dir)
        self.step = 0  # batches of the whole run handed to the loop, on this rank
        self.resumed_from: int | None = 0  # the step count of the loaded state (None: unknown)
        self.run: int | None = None
        self._file: Any = None
        self._info: dict[str, Any] = {}

    def resumed(self, step: int | None) -> None:
        """A state with the run's step count ``step`` was loaded (None: a state saved without a sink)."""
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise StateError(f"audit step must be an int >= 0, got {step!r:.40}")
        self.resumed_from, self.step = step, step or 0
        if self.run is not None and self._info:
            self._write_run_file()

    def start(self, rank: int, world_size: int, reads: bool, info: dict[str, Any]) -> None:
        """Once per launch, at its first iteration (collective when distributed)."""
        if self.run is not None:
            return
        if world_size > 1 and not (dist.is_available() and dist.is_initialized()):
            raise ValueError(f"ShardLoader(audit_dir={self.audit_dir!r}) on {world_size} ranks needs "
                             f"torch.distributed initialized: the ranks agree on the launch's run number")
        os.makedirs(self.audit_dir, exist_ok=True)
        self.run, writer = _agree(_next_run(self.audit_dir), rank, reads)
        if not writer:
            return
        self._file = open(os.path.join(self.audit_dir, f"run{self.run:03d}-rank{rank}.jsonl"), "a", buffering=1)
        weakref.finalize(self, self._file.close)  # line-buffered: nothing left to flush but a partial line
        if rank == 0:
            self._info = info
            self._write_run_file()

    @property
    def writes_run_file(self) -> bool:
        """Whether this process is rank 0's writer (it writes runNNN.json and the drops)."""
        return self._file is not None and bool(self._info)

    def iteration(self, epoch: int, dropped: list[int]) -> None:
        """Rank 0, at the first batch of an epoch iteration: the samples its plan drops (R3)."""
        if self.writes_run_file:
            line = {"run": self.run, "epoch": epoch, "step": self.step, "dropped": dropped}
            self._file.write(json.dumps(line) + "\n")

    def batch(self, epoch: int, batch: Any, tokens: bool) -> None:
        """One batch handed to the loop: counted on every process, written by the writers."""
        self.step += 1
        if self._file is None:
            return
        key, values = ("pairs", _pairs(batch)) if tokens else ("ids", _ids(batch))
        self._file.write(json.dumps({"run": self.run, "epoch": epoch, "step": self.step, key: values}) + "\n")

    def rewind(self, batches: int) -> None:
        """``batches`` handed over were a look-ahead the loop never used (``ShardLoader.rewind``):
        the step count goes back; a batch handed over again is written again with the same
        step, and the audit keeps the last line of a step (read/audit_lines.py)."""
        self.step -= batches

    def _write_run_file(self) -> None:
        path = os.path.join(self.audit_dir, f"run{self.run:03d}.json")
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump({"resumed_from_step": self.resumed_from, **self._info}, fh)
        os.replace(tmp, path)


def _ids(batch: Any) -> list[int]:
    index = batch["_index"]
    real = index[~batch["_padded"]] if "_padded" in batch else index
    return [int(i) for i in real.reshape(-1).tolist()]


def _pairs(batch: Any) -> list[list[int]]:
    index, offset = batch["_index"].reshape(-1), batch["_token_offset"].reshape(-1)
    real = index >= 0
    return torch.stack([index[real], offset[real]], dim=1).tolist()


def _next_run(audit_dir: str) -> int:
    runs = [int(m.group(1)) for name in os.listdir(audit_dir) if (m := _RUN.match(name))]
    return max(runs) + 1 if runs else 0


def _agree(number: int, rank: int, reads: bool) -> tuple[int, bool]:
    """Data-parallel rank 0's run number, and whether this process writes its rank's lines (the
    first reading process of its data-parallel rank). All processes scan the folder before any
    writes: the all_gather is the barrier."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return number, reads
    rows = all_gather_ints([number, rank, int(reads)])
    first: dict[int, int] = {}
    for process, (_, dp_rank, reading) in enumerate(rows):
        if reading:
            first.setdefault(dp_rank, process)
    return rows[first.get(0, 0)][0], first.get(rank) == dist.get_rank()
