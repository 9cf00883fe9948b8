"""Simulated data-parallel ranks in one process for the resume check (specs/resume-state.md
R18-R28): ``R`` loaders made with ``data_parallel=(r, R)``, stepped in lockstep, and the
collective ``state_dict()`` assembled by replaying each rank's gather row (the boundary's
``gather_by_dp_rank`` patched to answer with every rank's row, no process group needed).
``in_process_workers()`` simulates a loader's DataLoader workers in this process too."""

from __future__ import annotations

import contextlib
import copy
import json
import types
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from torch.utils.data import DataLoader

import shardkit as sk
from shardkit.loader.topology import Topology

GATHERS = ("shardkit.loader.boundary.gather_by_dp_rank", "shardkit.loader.token_cursors.gather_by_dp_rank")
Make = Callable[[int, int], sk.ShardLoader]  # (rank, world) -> a loader of that rank


def gathered_state(loaders: list[sk.ShardLoader]) -> dict[str, Any]:
    """The global state of ``loaders`` (rank order) as one collective ``state_dict()`` gives it."""
    rows: dict[str, dict[int, list[int]]] = {}

    def gather(row: list[int], topology: Topology, reads: bool, what: str) -> list[list[int]]:
        seen = rows.setdefault(what, {})
        seen[topology.rank] = list(row)
        return [seen.get(rank, list(row)) for rank in range(topology.world_size)]

    with contextlib.ExitStack() as patches:
        for target in GATHERS:
            patches.enter_context(mock.patch(target, gather))
        for loader in loaders:  # first pass: every rank's rows
            loader.state_dict()
        state = loaders[0].state_dict()
    result: dict[str, Any] = json.loads(json.dumps(state))
    return result


class Ranks:
    """``world`` loaders of one job, iterated in lockstep (equal steps on every rank: G3)."""

    def __init__(self, make: Make, world: int, state: dict[str, Any] | None = None) -> None:
        self.loaders = [make(rank, world) for rank in range(world)]
        if state is not None:
            for loader in self.loaders:
                loader.load_state_dict(json.loads(json.dumps(state)))
        self._its: list[Iterator[Any]] | None = None

    def step(self) -> list[Any] | None:
        """One batch from every rank (None at the epoch's end)."""
        if self._its is None:
            self._its = [iter(loader) for loader in self.loaders]
        try:
            return [next(it) for it in self._its]
        except StopIteration:
            return None

    def run(self, steps: int | None) -> int:
        """Up to ``steps`` lockstep steps (None: to the epoch's end); the steps taken."""
        taken = 0
        while steps is None or taken < steps:
            if self.step() is None:
                break
            taken += 1
        return taken

    def state(self) -> dict[str, Any]:
        return gathered_state(self.loaders)


# ---- DataLoader workers, in this process ----------------------------------------------------------
_worker: list[types.SimpleNamespace | None] = [None]  # the simulated worker running now (get_worker_info)


@contextlib.contextmanager
def _as_worker(worker: int, workers: int) -> Iterator[None]:
    _worker[0] = types.SimpleNamespace(id=worker, num_workers=workers)
    try:
        yield
    finally:
        _worker[0] = None


def _round_robin(loader: sk.ShardLoader) -> Iterator[Any]:
    """What DataLoader's in-order iterator hands ``loader`` with ``num_workers`` workers: each
    worker's stream (``iter()`` of its own copy of the dataset, as a forked worker has, sharing
    only L6's control block, in that worker's slot), items taken round robin over the workers not
    yet exhausted (L4, P30)."""
    workers, dataset = loader.num_workers, loader.dataset
    streams = []
    for worker in range(workers):
        mine = copy.deepcopy(dataset, {id(dataset.control): dataset.control})  # type: ignore[attr-defined]
        with _as_worker(worker, workers):
            streams.append(iter(mine))
    active = list(range(workers))
    while active:
        for worker in list(active):
            with _as_worker(worker, workers):
                item = next(streams[worker], None)
            if item is None:
                active.remove(worker)
            else:
                yield item


@contextlib.contextmanager
def in_process_workers() -> Iterator[None]:
    """ShardLoaders with ``num_workers > 0`` iterate their workers' streams in this process
    (``_round_robin``; no shared ring: batches travel packed in fresh buffers, X7), so resume
    chains over ranks × workers × ``batches_per_transfer`` run without processes."""
    original = DataLoader.__iter__

    def iterate(self: DataLoader[Any]) -> Any:
        if isinstance(self, sk.ShardLoader) and self.num_workers > 0:
            return _round_robin(self)
        return original(self)

    with contextlib.ExitStack() as patches:
        patches.enter_context(mock.patch.object(DataLoader, "__iter__", iterate))
        patches.enter_context(mock.patch.object(sk.ShardLoader, "_ring_for_workers", lambda self: None))
        patches.enter_context(mock.patch("shardkit.loader.topology.get_worker_info", lambda: _worker[0]))
        yield
