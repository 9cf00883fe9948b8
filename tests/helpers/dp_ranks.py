"""Real gloo jobs of ``TP × DP`` ranks over one shardkit dataset (specs/partition.md P22-P26).

Global rank ``r`` is tensor-parallel rank ``r % tp`` of data-parallel rank ``r // tp`` (the
tensor-parallel ranks of one replica are neighbours, as Megatron lays them out). Each rank
gives its data-parallel group as a ``ProcessGroup`` (``how="group"``), a 2-D ``DeviceMesh``'s
``"dp"`` dimension (``"mesh"``), a plain ``(rank, size)`` (``"tuple"``) or the ``StreamOptions``
override (``"options"``), records what each step's batch was (the real sample indices or the
token positions, and a digest of every tensor's bytes) and, after ``stop_after`` steps, saves
the collective ``state_dict()``, sets its ``saved`` event and waits to be SIGKILLed with its
DataLoader workers (its own process group). Records are plain JSON, handed back through files.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import multiprocessing
import os
import signal
import threading
import traceback
from dataclasses import dataclass
from typing import Any

import torch

import shardkit as sk
from shardkit.errors import StateError
from tests.helpers.rank_procs import read_text
from tests.helpers.token_data import consumed_pairs

_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["torch", "torch.distributed", "shardkit.loader", __name__])
HANG_S = 120  # a rank that has not saved or finished by then is hung (no timing is asserted)
TOKENS = sk.TokenBlocks(16, eos_id=2, bos_id=1)


@dataclass(frozen=True)
class DPJob:
    """One launch: ``tp × dp`` processes reading ``data`` (a dataset path or an ``sk.Mixture``)."""

    data: str | sk.Mixture
    tp: int
    dp: int
    tokens: bool = False
    batch_size: int = 3
    workers: int = 1
    how: str = "group"
    stop_after: int | None = None  # steps, then save and wait to be killed; None: to the end
    no_data: tuple[int, ...] = ()  # global ranks that read nothing (reads=False)
    no_data_workers: int | None = None  # their num_workers (None: ``workers``)
    extra_step: tuple[int, ...] = ()  # global ranks that take one more batch before saving
    audit_dir: str | None = None  # ShardLoader(audit_dir=): the audit sink (specs/resume-state.md R15)

    @property
    def world(self) -> int:
        return self.tp * self.dp + len(self.no_data)


@dataclass
class RankResult:
    rank: int
    steps: list[dict[str, Any]]  # per step: {"ids": [...], "digest": hex}
    state: dict[str, Any] | None
    length: int
    stats: dict[str, Any] | None = None
    error: str | None = None  # a StateError's message, when the rank met one


def batch_digest(batch: dict[str, Any]) -> str:
    """sha256 over every tensor of ``batch`` (key, dtype, shape, bytes): equal iff byte-identical."""
    digest = hashlib.sha256()
    for key in sorted(batch):
        value = batch[key]
        if isinstance(value, torch.Tensor):
            digest.update(f"{key}:{value.dtype}:{tuple(value.shape)}".encode())
            digest.update(value.contiguous().numpy().tobytes())
    return digest.hexdigest()


def batch_ids(batch: dict[str, Any], tokens: bool) -> list[Any]:
    """The real samples (their ``_index``) or token positions (``[index, offset]``) of ``batch``."""
    if tokens:
        return [list(pair) for pair in consumed_pairs(batch)]
    index = batch["_index"].tolist()
    padded = batch["_padded"].tolist() if "_padded" in batch else [False] * len(index)
    return [i for i, p in zip(index, padded, strict=True) if not p]


def _data_parallel(job: DPJob, rank: int) -> Any:
    import torch.distributed as dist

    readers = job.tp * job.dp
    groups = [dist.new_group([d * job.tp + t for d in range(job.dp)]) for t in range(job.tp)]  # every rank
    if rank >= readers:  # a rank that needs no data still knows the data-parallel size
        return sk.DataParallel(rank=0, size=job.dp, reads=False)
    if job.how == "group":
        return groups[rank % job.tp]
    if job.how == "mesh":
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (job.dp, job.tp), mesh_dim_names=("dp", "tp"))
        return sk.DataParallel(group=mesh, mesh_dim="dp")
    if job.how == "tuple":
        return (rank // job.tp, job.dp)
    return None  # "options": pinned on the dataset's options below


def _loader(job: DPJob, rank: int) -> sk.ShardLoader:
    kwargs: dict[str, Any] = {"tokens": TOKENS} if job.tokens else {}
    data_parallel = _data_parallel(job, rank)
    if data_parallel is not None:  # "options" passes no keyword: it runs on a shardkit without one
        kwargs["data_parallel"] = data_parallel
    dataset = sk.StreamingDataset(job.data, batch_size=job.batch_size, seed=7, tail="pad", shuffle_window=8,
                                  with_index=True, **kwargs)
    if job.how == "options" and rank < job.tp * job.dp:  # the documented override for custom launchers
        dataset.options = dataclasses.replace(dataset.options, rank=rank // job.tp, world_size=job.dp)
    quiet = rank >= job.tp * job.dp and job.no_data_workers is not None
    return sk.ShardLoader(dataset, num_workers=job.no_data_workers if quiet else job.workers,
                          **({"audit_dir": job.audit_dir} if job.audit_dir else {}))


def _run(job: DPJob, rank: int, resume: dict[str, Any] | None) -> RankResult:
    loader = _loader(job, rank)
    if resume is not None:
        loader.load_state_dict(resume)
    result = RankResult(rank, [], None, len(loader))
    batches = iter(loader)
    while job.stop_after is None or len(result.steps) < job.stop_after + (rank in job.extra_step):
        batch = next(batches, None)
        if batch is None:
            break
        result.steps.append({"ids": batch_ids(batch, job.tokens), "digest": batch_digest(batch)})
    try:
        result.state = loader.state_dict()  # collective over every process
    except StateError as exc:
        result.error = str(exc)
    result.stats = loader.stats(gather=True) if result.error is None else None
    return result


def _rank_main(job: DPJob, rank: int, workdir: str, resume: dict[str, Any] | None, saved: Any) -> None:
    import torch.distributed as dist

    os.setpgid(0, 0)  # the test SIGKILLs this rank and its DataLoader workers together
    multiprocessing.set_start_method("fork", force=True)
    try:
        dist.init_process_group("gloo", init_method=f"file://{workdir}/store", rank=rank,
                                world_size=job.world, timeout=datetime.timedelta(seconds=HANG_S))
        result = _run(job, rank, resume)
        with open(f"{workdir}/rank{rank}.tmp", "w") as fh:
            json.dump(dataclasses.asdict(result), fh)
        os.replace(f"{workdir}/rank{rank}.tmp", f"{workdir}/rank{rank}.json")
        saved.set()
        if job.stop_after is not None and result.error is None:
            threading.Event().wait()  # mid-epoch, workers alive: wait for the SIGKILL
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        with open(f"{workdir}/rank{rank}.error", "w") as fh:
            fh.write(traceback.format_exc())
        saved.set()
        raise


def run_job(job: DPJob, workdir: str, resume: dict[str, Any] | None = None) -> list[RankResult]:
    """Launch ``job``; once every rank has saved, SIGKILL them all (``stop_after``) or let them
    finish. Returns each global rank's result (the errors of ranks that failed are raised)."""
    os.makedirs(workdir, exist_ok=True)
    events = [_CTX.Event() for _ in range(job.world)]
    procs = [_CTX.Process(target=_rank_main, args=(job, rank, workdir, resume, events[rank]))
             for rank in range(job.world)]
    for proc in procs:
        proc.start()
    waited = [event.wait(HANG_S) for event in events]
    if job.stop_after is not None:
        for proc in procs:
            if proc.pid is not None:
                _kill_group(proc.pid)
    for proc in procs:
        proc.join(HANG_S)
    for proc in procs:
        if proc.is_alive():
            _kill_group(proc.pid or 0)
            proc.join()
    errors = [read_text(f"{workdir}/rank{rank}.error") for rank in range(job.world)]
    assert all(waited), f"ranks {[r for r, w in enumerate(waited) if not w]} hung: {errors}"
    assert not any(errors), [e for e in errors if e]
    results = []
    for rank in range(job.world):
        with open(f"{workdir}/rank{rank}.json") as fh:
            results.append(RankResult(**json.load(fh)))
    return results


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
