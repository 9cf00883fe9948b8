"""A reusable resume-equivalence check for ``ShardLoader`` (in the spirit of torchdata's
``test/nodes/utils.py``): run a job as a chain of *segments*, each on its own shape (ranks ×
workers × batch size × loader options), each killed after some number of steps and resumed
from the state the previous one saved; then prove what the training loop received.

``run_chain(data, segments, num_epochs, workdir)`` runs the chain — in this process when a
segment has one rank, else as real gloo ranks (``tests/helpers/ranks.py``) — and
``check_chain(...)`` asserts, per epoch:

- **exactly once** (G2 in docs/guarantees.md, G6, R3): no sample is received as a real sample twice over all
  segments; with ``tail="pad"`` every sample exactly once; with ``drop`` the samples never
  received are exactly the last plan's ``num_dropped`` (and, when no segment changed the
  partition, the uninterrupted plan's dropped tail);
- **plan order per consumer** (P9, R2, R4): every received batch is the next batch of one
  consumer of the segment's plan, starting at the plan's start offsets — so a same-topology
  resume continues each consumer exactly where the uninterrupted run would have;
- **consumed boundary** (G5, R9): the saved offsets are the start offsets plus what the loop
  received per consumer, never what workers prefetched;
- **equal steps** (G3, P2, R4): every rank received the same number of batches, equal to
  ``len(loader)`` asked before iterating.

Records are plain JSON (lists of ints) so spawned ranks can hand them back through files.
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings

import shardkit as sk
from shardkit.plan import Plan
from shardkit.plan.params import DEFAULT_SPREAD
from tests.helpers.rank_procs import gloo_rank, run_procs

Batch = tuple[tuple[int, ...], tuple[bool, ...]]  # (global indices, pad flags) of one batch

# Warnings torch gives about the host, not about shardkit (pyproject turns warnings into errors).
TOO_MANY_WORKERS = (  # 3 workers on a 2-core machine
    "ignore:This DataLoader will create \\d+ worker processes in total:UserWarning"
)
PIN_WITHOUT_ACCELERATOR = (
    "ignore:'pin_memory' argument is set as true but no accelerator is found:UserWarning"
)


def chain_settings(max_examples: int) -> settings:
    """Hypothesis settings of a resume-chain property: every example reads real data, so no
    deadline, and large draws are expected."""
    return settings(max_examples=max_examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@dataclass(frozen=True)
class DataSpec:
    """The dataset and the plan parameters a job keeps across segments (except batch size)."""

    path: str
    num_samples: int
    shuffle: bool = True
    seed: int = 0
    tail: str = "drop"
    shuffle_window: int = 16
    interleave: int = 1  # read-time lanes (specs/partition.md P13)
    spread: int = DEFAULT_SPREAD  # consumers a shard is split among (P18; the loader's default)


@dataclass(frozen=True)
class Shape:
    """One segment's topology and loader options."""

    world_size: int = 1
    num_workers: int = 0
    batch_size: int = 4
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    pin_memory: bool = False
    in_order: bool = True
    batches_per_transfer: int = 4  # ShardLoader's default (X8)


@dataclass(frozen=True)
class Segment:
    """Run ``shape`` until ``stop_after`` steps (from the segment's start, over epochs), or to
    the end of the job when ``None``; then save the loader state (collectively)."""

    shape: Shape
    stop_after: int | None = None


@dataclass
class EpochRecord:
    """What one rank received in one epoch of one segment."""

    epoch: int
    length: int  # len(loader) asked before iterating
    batches: list[Batch] = field(default_factory=list)


@dataclass
class SegmentResult:
    segment: Segment
    resumed_from: dict[str, Any] | None
    ranks: list[list[EpochRecord]]  # [rank][i]
    state: dict[str, Any]  # saved at the stop (or at the end of the last epoch)


# ---- running one rank of one segment (also the body of a spawned gloo rank) ------------------

def make_dataset(data: DataSpec, batch_size: int) -> sk.StreamingDataset:
    return sk.StreamingDataset(
        data.path, batch_size=batch_size, shuffle=data.shuffle, seed=data.seed,
        tail=data.tail, shuffle_window=data.shuffle_window, with_index=True, interleave=data.interleave,
        spread=data.spread,
    )


def make_loader(data: DataSpec, shape: Shape) -> sk.ShardLoader:
    return sk.ShardLoader(
        make_dataset(data, shape.batch_size), num_workers=shape.num_workers, pin_memory=shape.pin_memory,
        prefetch_factor=shape.prefetch_factor, persistent_workers=shape.persistent_workers,
        in_order=shape.in_order, batches_per_transfer=shape.batches_per_transfer,
    )


def to_record(batch: dict[str, Any]) -> Batch:
    indices = tuple(int(i) for i in batch["_index"].tolist())
    padded = batch.get("_padded")
    if padded is None:
        return indices, (False,) * len(indices)
    return indices, tuple(bool(p) for p in padded.tolist())


def run_rank(data: DataSpec, segment: Segment, num_epochs: int,
             resume: dict[str, Any] | None) -> tuple[list[EpochRecord], dict[str, Any]]:
    """One rank's training loop: resume, then epochs until the stop; returns records + state.

    The loop is the one users write: ``load_state_dict`` once, then ``set_epoch(e)`` and
    ``for batch in loader`` from the state's epoch on (R7).
    """
    loader = make_loader(data, segment.shape)
    first_epoch = 0
    if resume is not None:
        loader.load_state_dict(resume)
        first_epoch = int(resume["epoch"])
    records: list[EpochRecord] = []
    taken = 0
    for epoch in range(first_epoch, num_epochs):
        loader.set_epoch(epoch)
        record = EpochRecord(epoch, len(loader))
        records.append(record)
        batches = iter(loader)
        while True:
            if segment.stop_after is not None and taken == segment.stop_after:
                state = loader.state_dict()  # collective: every rank stops at the same step
                del batches
                return records, state
            try:
                batch = next(batches)
            except StopIteration:
                break
            record.batches.append(to_record(batch))
            taken += 1
    return records, loader.state_dict()


def records_to_json(records: list[EpochRecord]) -> list[dict[str, Any]]:
    return [asdict(r) for r in records]


def records_from_json(raw: list[dict[str, Any]]) -> list[EpochRecord]:
    return [EpochRecord(r["epoch"], r["length"],
                        [(tuple(i), tuple(p)) for i, p in r["batches"]]) for r in raw]


# ---- real gloo ranks ---------------------------------------------------------------------------

# Ranks are forked from a forkserver that imported torch once: a spawn per rank would import
# torch again each time (seconds), a plain fork of the pytest process would inherit its threads.
_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["torch", "torch.distributed", "shardkit.loader", __name__])
HANG_S = 120  # a rank that has not finished by then is hung (no timing is asserted)


def run_ranks(data: DataSpec, segment: Segment, num_epochs: int, resume: dict[str, Any] | None,
              workdir: str) -> tuple[list[list[EpochRecord]], dict[str, Any]]:
    """Run ``segment`` as ``world_size`` real processes in one gloo group (FileStore rendezvous)."""
    os.makedirs(workdir, exist_ok=True)
    world = segment.shape.world_size
    exitcodes, errors, hung = run_procs(_CTX, _rank_main,
                                        [(rank, world, workdir, data, segment, num_epochs, resume)
                                         for rank in range(world)], workdir, HANG_S)
    assert not hung, f"ranks {hung} still running after {HANG_S} s (hang at epoch end?): {errors}"
    assert all(code == 0 for code in exitcodes), f"exit codes {exitcodes}: {[e for e in errors if e]}"
    ranks, states = [], []
    for rank in range(world):
        with open(f"{workdir}/rank{rank}.json") as fh:
            out = json.load(fh)
        ranks.append(records_from_json(out["records"]))
        states.append(out["state"])
    assert all(s == states[0] for s in states), "state_dict() differs between ranks"
    return ranks, states[0]


def _rank_main(rank: int, world: int, workdir: str, data: DataSpec, segment: Segment,
               num_epochs: int, resume: dict[str, Any] | None) -> None:

    # A forkserver child inherits "forkserver" as its start method; a rank started by torchrun
    # has the platform default (fork), and its DataLoader workers should too.
    multiprocessing.set_start_method("fork", force=True)
    with gloo_rank(workdir, rank, world, HANG_S):
        records, state = run_rank(data, segment, num_epochs, resume)
        with open(f"{workdir}/rank{rank}.json", "w") as fh:
            json.dump({"records": records_to_json(records), "state": state}, fh)


# ---- running a chain ----------------------------------------------------------------------

def run_chain(data: DataSpec, segments: list[Segment], num_epochs: int, workdir: str,
              first_state: dict[str, Any] | None = None,
              processes: bool = False) -> list[SegmentResult]:
    """Run ``segments`` one after another, each resuming from the previous one's state.

    A one-rank segment runs in this process unless ``processes`` (then it is a gloo group of
    one, like a one-GPU ``torchrun``).
    """
    results: list[SegmentResult] = []
    state = first_state
    for number, segment in enumerate(segments):
        resume = None if state is None else json.loads(json.dumps(state))  # R1: plain JSON
        if segment.shape.world_size == 1 and not processes:
            records, new_state = run_rank(data, segment, num_epochs, resume)
            ranks = [records]
        else:
            ranks, new_state = run_ranks(data, segment, num_epochs, resume,
                                         f"{workdir}/segment{number}")
        results.append(SegmentResult(segment, resume, ranks, new_state))
        state = new_state
    return results


# ---- checking ----------------------------------------------------------------------------

def plan_of(data: DataSpec, shape: Shape, epoch: int, resume: dict[str, Any] | None) -> Plan:
    dataset = make_dataset(data, shape.batch_size)
    state = resume["plan"] if resume is not None and int(resume["epoch"]) == epoch else None
    return dataset.plan(epoch, shape.world_size, shape.num_workers, state)


def consumer_batches(plan: Plan, consumer: int) -> list[Batch]:
    """Consumer ``c``'s whole batch sequence, from the pure plan (P9)."""
    offsets = plan.shard_offsets
    indices: list[int] = []
    flags: list[bool] = []
    for window in plan.consumer_windows(consumer):
        indices.extend(int(i) for i in window.global_indices(offsets))
        flags.extend(bool(p) for p in window.padded_mask())
    size = plan.params.batch_size
    return [(tuple(indices[i:i + size]), tuple(flags[i:i + size]))
            for i in range(0, len(indices), size)]


def assign_to_consumers(plan: Plan, rank: int, received: list[Batch]) -> dict[int, int]:
    """Match each received batch to the next batch of one of ``rank``'s consumers; every batch
    must match (P9/R2/R4: consumers continue in plan order). Returns batches per consumer."""
    width = plan.params.workers_per_rank
    consumers = range(rank * width, (rank + 1) * width)
    expected = {c: consumer_batches(plan, c) for c in consumers}
    position = {c: plan.start_offsets[c] // plan.params.batch_size for c in consumers}
    taken = collections.Counter[int]()
    for step, batch in enumerate(received):
        following = {c: expected[c][position[c]] for c in consumers
                     if position[c] < len(expected[c])}
        owner = next((c for c, batch_c in following.items() if batch_c == batch), None)
        assert owner is not None, (
            f"rank {rank} step {step}: batch {batch[0]} is no consumer's next batch "
            f"(next: { {c: b[0] for c, b in following.items()} })"
        )
        position[owner] += 1
        taken[owner] += 1
    return dict(taken)


def check_chain(data: DataSpec, results: list[SegmentResult], num_epochs: int) -> None:
    """All the properties of the module docstring, for every epoch of the chain."""
    received: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    last_plan: dict[int, Plan] = {}
    changed: set[int] = set()
    reference = results[0].segment.shape
    for result in results:
        shape = result.segment.shape
        epochs = {r.epoch for rank in result.ranks for r in rank}
        for epoch in sorted(epochs):
            plan = plan_of(data, shape, epoch, result.resumed_from)
            last_plan[epoch] = plan
            if plan.level > 0 or not _same_partition(shape, reference):
                changed.add(epoch)
            taken = _check_epoch_of_segment(plan, result, epoch)
            for rank in result.ranks:
                for record in rank:
                    if record.epoch == epoch:
                        received[epoch].update(real_ids(record.batches))
            if epoch == max(epochs):
                _check_saved_offsets(plan, result, epoch, taken)
    for epoch in range(num_epochs):
        _check_exactly_once(data, received[epoch], last_plan.get(epoch), epoch,
                            None if epoch in changed else plan_of(data, reference, epoch, None))


def _same_partition(shape: Shape, reference: Shape) -> bool:
    return (shape.world_size, max(shape.num_workers, 1), shape.batch_size) == (
        reference.world_size, max(reference.num_workers, 1), reference.batch_size)


def _check_epoch_of_segment(plan: Plan, result: SegmentResult, epoch: int) -> dict[int, int]:
    """Equal steps (== len(loader)) and per-consumer plan order; returns batches per consumer."""
    taken: dict[int, int] = {}
    steps = []
    for rank, records in enumerate(result.ranks):
        record = next(r for r in records if r.epoch == epoch)
        steps.append(len(record.batches))
        stopped_here = result.segment.stop_after is not None and record is records[-1]
        if not stopped_here:
            assert len(record.batches) == record.length, (
                f"epoch {epoch} rank {rank}: len(loader) said {record.length}, "
                f"got {len(record.batches)} batches")
        taken.update(assign_to_consumers(plan, rank, record.batches))
    assert len(set(steps)) == 1, f"epoch {epoch}: steps per rank differ: {steps} (G3)"
    lengths = {next(r for r in records if r.epoch == epoch).length for records in result.ranks}
    assert len(lengths) == 1, f"epoch {epoch}: len(loader) differs between ranks: {lengths}"
    return taken


def _check_saved_offsets(plan: Plan, result: SegmentResult, epoch: int,
                         taken: dict[int, int]) -> None:
    """G5/R9: the saved offsets are exactly start + received, per consumer."""
    state = result.state
    assert state["epoch"] == epoch, (state["epoch"], epoch)
    batch = plan.params.batch_size
    want = [start + taken.get(c, 0) * batch for c, start in enumerate(plan.start_offsets)]
    assert state["plan"]["offsets"] == want, (
        f"epoch {epoch}: saved offsets {state['plan']['offsets']}, the loop received {want}")


def _check_exactly_once(data: DataSpec, counts: collections.Counter[int], plan: Plan | None,
                        epoch: int, uninterrupted: Plan | None) -> None:
    twice = sorted(i for i, n in counts.items() if n > 1)
    assert not twice, f"epoch {epoch}: samples received more than once: {twice[:20]}"
    assert all(0 <= i < data.num_samples for i in counts), f"epoch {epoch}: index out of range"
    missing = data.num_samples - len(counts)
    if data.tail == "pad":
        assert missing == 0, f"epoch {epoch}: {missing} samples never received with tail='pad'"
        return
    assert plan is not None
    assert missing == plan.num_dropped, (
        f"epoch {epoch}: {missing} samples never received, the last plan drops {plan.num_dropped}")
    if uninterrupted is not None:
        want = collections.Counter(i for c in range(uninterrupted.num_consumers)
                                   for i in real_ids(consumer_batches(uninterrupted, c)))
        assert counts == want, f"epoch {epoch}: the multiset differs from the uninterrupted run's"


def real_ids(batches: Iterable[Batch]) -> list[int]:
    """The real (non-pad) sample indices of ``batches``, in order."""
    return [i for indices, flags in batches for i, p in zip(indices, flags, strict=True) if not p]


def pad_ids(batches: Iterable[Batch]) -> list[int]:
    """The pad repeats of ``batches`` (flagged ``_padded``), in order."""
    return [i for indices, flags in batches for i, p in zip(indices, flags, strict=True) if p]


def rank_sequence(results: list[SegmentResult], rank: int, epoch: int) -> list[Batch]:
    """Rank ``rank``'s batches of ``epoch`` over all segments of a chain, in received order."""
    return [batch for result in results for record in result.ranks[rank]
            if record.epoch == epoch for batch in record.batches]


def check_same_order(data: DataSpec, segments: list[Segment], num_epochs: int,
                     results: list[SegmentResult], workdir: str) -> None:
    """L4: on same-topology resumes with ``in_order=True``, every rank's batches over the chain
    equal the uninterrupted run's, in the same order (not only the same per consumer)."""
    shape = segments[0].shape
    assert all(s.shape == shape for s in segments) and shape.in_order
    whole = run_chain(data, [Segment(shape)], num_epochs, f"{workdir}/uninterrupted",
                      processes=shape.world_size > 1)
    for rank in range(shape.world_size):
        for epoch in range(num_epochs):
            got, want = rank_sequence(results, rank, epoch), rank_sequence(whole, rank, epoch)
            assert len(got) == len(want), f"rank {rank} epoch {epoch}: {len(got)} vs {len(want)}"
            differ = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
            assert not differ, (f"rank {rank} epoch {epoch}: the resumed order differs from the "
                                f"uninterrupted run's at steps {differ[:10]}")
