"""Real gloo jobs reading in ``order="global"`` (specs/partition.md P27-P35): each launch is
``world_size`` processes in one gloo group (FileStore rendezvous), each with ``num_workers``
DataLoader workers; a launch may resume from the state a previous one saved, stop after some
steps (state saved collectively) and then SIGKILL itself — every rank, its workers mid-prefetch —
a few steps later, as a preempted job does. What each rank's loop received is written per step,
so a killed launch's records survive it.

``global_batches(records)`` rebuilds the global batches a launch trained (each step's rank
slices concatenated in rank order, P27), so launches on different topologies compare bit for bit.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from dataclasses import dataclass
from typing import Any

import shardkit as sk
from tests.helpers.rank_procs import gloo_rank, read_text, run_procs

HANG_S = 120  # a launch not finished by then is hung (no timing is asserted)
# Ranks are forked from a forkserver that imported torch once (as tests/helpers/resume.py does).
_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["torch", "torch.distributed", "shardkit.loader", __name__])

Batch = tuple[tuple[int, ...], tuple[bool, ...]]  # ids and pad flags of one (rank or global) batch


@dataclass(frozen=True)
class GlobalJob:
    """What fixes the global batches: the dataset, seed, tail, window and ``B_g`` (P27)."""

    path: str
    global_batch: int
    epochs: int = 2
    seed: int = 0
    tail: str = "drop"
    shuffle_window: int = 16
    tokens: sk.TokenBlocks | None = None  # token blocks (TB30): a row's slots record (_index, _token_offset)


@dataclass(frozen=True)
class Launch:
    """One launch's topology; ``stop_after`` steps (over epochs) then the state is saved, and
    with ``kill_after`` more steps every rank SIGKILLs itself (else it exits cleanly)."""

    world_size: int
    num_workers: int
    group: int = 2  # batches_per_transfer (X8)
    stop_after: int | None = None
    kill_after: int | None = None


@dataclass
class LaunchResult:
    records: list[list[tuple[int, Batch]]]  # [rank] -> (epoch, batch) per step, in order
    lengths: list[dict[int, int]]  # [rank] -> epoch -> len(loader) before iterating it
    state: dict[str, Any] | None  # saved at stop_after (or at the end)
    exitcodes: list[int]


def make_loader(job: GlobalJob, launch: Launch, rank: int) -> sk.ShardLoader:
    dataset = sk.StreamingDataset(job.path, batch_size=job.global_batch // launch.world_size, order="global",
                                  tokens=job.tokens,
                                  seed=job.seed, tail=job.tail, shuffle_window=job.shuffle_window, with_index=True,
                                  data_parallel=(rank, launch.world_size) if launch.world_size > 1 else None)
    return sk.ShardLoader(dataset, num_workers=launch.num_workers, batches_per_transfer=launch.group)


def run_launch(job: GlobalJob, launch: Launch, resume: dict[str, Any] | None, workdir: str) -> LaunchResult:
    """Run one launch as real processes; returns what every rank received and the saved state."""
    os.makedirs(workdir, exist_ok=True)
    world = launch.world_size
    exitcodes, errors, hung = run_procs(_CTX, _rank_main, [(rank, workdir, job, launch, resume)
                                                           for rank in range(world)], workdir, HANG_S)
    if hung:
        raise AssertionError(f"ranks {hung} still running after {HANG_S} s: {errors}")
    wanted = -signal.SIGKILL if launch.kill_after is not None else 0
    if any(code != wanted for code in exitcodes):
        raise AssertionError(f"exit codes {exitcodes}, expected {wanted}: {[e for e in errors if e]}")
    records, lengths = [], []
    for rank in range(world):
        with open(f"{workdir}/rank{rank}.steps") as fh:
            steps = [json.loads(line) for line in fh]
        records.append([(s["epoch"], (tuple(s["ids"]), tuple(s["padded"]))) for s in steps if "ids" in s])
        lengths.append({s["epoch"]: s["length"] for s in steps if "length" in s})
    state_text = read_text(f"{workdir}/state.json")
    return LaunchResult(records, lengths, json.loads(state_text) if state_text else None, exitcodes)


def global_batches(result: LaunchResult, steps: int | None = None) -> list[tuple[int, Batch]]:
    """The launch's global batches, the first ``steps`` of them: per step, the ranks' slices
    concatenated in rank order (P27); every rank must have taken the same steps (G3)."""
    counts = {len(r) for r in result.records}
    if len(counts) != 1:
        raise AssertionError(f"steps per rank differ: {[len(r) for r in result.records]} (G3, P30)")
    out = []
    for step in range(counts.pop() if steps is None else steps):
        parts = [rank[step] for rank in result.records]
        epochs = {epoch for epoch, _ in parts}
        if len(epochs) != 1:
            raise AssertionError(f"step {step}: ranks in different epochs {epochs}")
        out.append((epochs.pop(), (sum((p[1][0] for p in parts), ()), sum((p[1][1] for p in parts), ()))))
    return out


def _rank_main(rank: int, workdir: str, job: GlobalJob, launch: Launch, resume: dict[str, Any] | None) -> None:

    multiprocessing.set_start_method("fork", force=True)  # DataLoader workers fork, as under torchrun
    with gloo_rank(workdir, rank, launch.world_size, HANG_S):
        with open(f"{workdir}/rank{rank}.steps", "w") as log:
            state = _train(job, launch, resume, rank, log)
        if rank == 0:
            with open(f"{workdir}/state.json.tmp", "w") as fh:
                json.dump(state, fh)
            os.replace(f"{workdir}/state.json.tmp", f"{workdir}/state.json")


def _train(job: GlobalJob, launch: Launch, resume: dict[str, Any] | None, rank: int, log: Any) -> dict[str, Any]:
    """The training loop users write: load the state, then epochs from its epoch on (R7)."""
    import torch.distributed as dist

    loader = make_loader(job, launch, rank)
    first = 0
    if resume is not None:
        loader.load_state_dict(resume)
        first = loader.next_epoch
    taken, saved = 0, None
    for epoch in range(first, job.epochs):
        loader.set_epoch(epoch)  # the loaded state's epoch keeps its state (R7)
        _line(log, {"epoch": epoch, "length": len(loader)})
        for batch in loader:
            _line(log, {"epoch": epoch, **_record(batch)})
            taken += 1
            if taken == launch.stop_after:
                saved = loader.state_dict()  # collective: every rank at the same step (L2)
                if rank == 0:
                    _write_json(log.name.rsplit("/", 1)[0] + "/state.json", saved)
                if launch.kill_after is None:
                    return saved
            if launch.kill_after is not None and taken == (launch.stop_after or 0) + launch.kill_after:
                dist.barrier()  # the state is on disk; now the whole job dies, workers mid-prefetch
                os.kill(os.getpid(), signal.SIGKILL)
    return loader.state_dict() if saved is None else saved


def _record(batch: dict[str, Any]) -> dict[str, Any]:
    """What a step received: ids and pad flags of samples; of token blocks, each slot's sample
    index and segment offset (``ids``, ``padded``: -1, 0 at padding)."""
    if "_token_offset" in batch:
        return {"ids": batch["_index"].reshape(-1).tolist(), "padded": batch["_token_offset"].reshape(-1).tolist()}
    return {"ids": batch["_index"].tolist(),
            "padded": batch["_padded"].tolist() if "_padded" in batch else [False] * len(batch["_index"])}


def _line(log: Any, entry: dict[str, Any]) -> None:
    log.write(json.dumps(entry) + "\n")
    log.flush()


def _write_json(path: str, value: Any) -> None:
    with open(path + ".tmp", "w") as fh:
        json.dump(value, fh)
    os.replace(path + ".tmp", path)
