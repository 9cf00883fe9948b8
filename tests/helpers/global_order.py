"""Strategies and materialising references for the global-order tests (specs/partition.md P27-P34).

The reference sequence is the *default* plan of one process (``order="shard"``, 1 rank, no
workers, batch ``B_g``, pad tail), so the global-order code is checked against code it does
not share (P29).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from shardkit.plan import Plan, PlanParams, build_plan
from shardkit.plan.global_order.order import GlobalOrderPlan, sequence_params, units_below
from shardkit.plan.global_order.state import build_global_plan, global_plan_to_state
from tests.helpers.plan_strategies import consumer_samples

FINGERPRINT = "xxh64:0123456789abcdef"


@dataclass(frozen=True)
class Topology:
    world_size: int
    num_workers: int
    batch_size: int
    group: int = 1


@st.composite
def topologies(draw: st.DrawFn, /, global_batch: int | None = None) -> Topology:
    """Ranks 1-8 x workers 0-4, ``group`` 1-3; with ``global_batch``, ranks (up to 16) divide it."""
    if global_batch is None:
        world = draw(st.integers(1, 8))
        batch = draw(st.integers(1, 12))
    else:
        world = draw(st.sampled_from([d for d in range(1, min(global_batch, 16) + 1) if global_batch % d == 0]))
        batch = global_batch // world
    return Topology(world, draw(st.integers(0, 4)), batch, draw(st.integers(1, 3)))


@st.composite
def epoch_params(draw: st.DrawFn, /) -> PlanParams:
    """What fixes the sequence: seed, epoch, shuffle, window, interleave; a tail."""
    return PlanParams(seed=draw(st.integers(0, 2**40)), epoch=draw(st.integers(0, 5)),
                      tail=draw(st.sampled_from(["drop", "pad"])), shuffle=draw(st.booleans()),
                      shuffle_window=draw(st.sampled_from([1, 3, 16, 64, 1000])),
                      interleave=draw(st.sampled_from([1, 1, 1, 3])), order="global")


def on(params: PlanParams, topology: Topology, **changes: Any) -> PlanParams:
    return replace(params, world_size=topology.world_size, num_workers=topology.num_workers,
                   batch_size=topology.batch_size, **changes)


Batch = tuple[tuple[int, ...], tuple[bool, ...]]  # a global batch: ids and pad flags, row order


def reference_ids(sizes: list[int], fixed: PlanParams,
                  plan_of: Callable[[PlanParams], Plan] | None = None) -> np.ndarray:
    """The epoch's sequence from the default 1-process plan (its real samples, in order)."""
    params = replace(fixed, order="shard", tail="pad")
    plan = plan_of(params) if plan_of else build_plan(sizes, params)
    out = consumer_samples(plan, 0)
    return out.ids[~out.padded]


def reference_batches(ids: np.ndarray, start: int, global_batch: int, tail: str) -> list[Batch]:
    """Global batches cut from ``ids[start:]`` (P27, P28, P33): rows by id, pads (repeats of the
    sequence from its start, whatever ``start``) last."""
    rest = ids[start:]
    count = len(rest) // global_batch if tail == "drop" else -(-len(rest) // global_batch)
    batches = []
    for g in range(count):
        real = sorted(rest[g * global_batch:(g + 1) * global_batch].tolist())
        first, stop = max(g * global_batch, len(rest)) - len(rest), (g + 1) * global_batch - len(rest)
        pads = [int(ids[i % len(ids)]) for i in range(first, stop)]
        batches.append((tuple(real + pads), (False,) * len(real) + (True,) * len(pads)))
    return batches


def assembled(plan: GlobalOrderPlan) -> list[Batch]:
    """The global batches as the ranks' consumers yield them: rank r's rows are its slice."""
    params, offsets = plan.params, plan.shard_offsets
    workers = params.workers_per_rank
    slices: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for consumer in range(plan.num_consumers):
        rank = consumer // workers
        windows = list(plan.consumer_windows(consumer))
        if len(windows) != plan.num_batches(consumer):
            raise AssertionError(f"consumer {consumer}: {len(windows)} windows, {plan.num_batches(consumer)} batches")
        for local, window in enumerate(windows):
            if window.num_samples != params.batch_size or window.num_decoded != params.batch_size:
                raise AssertionError(f"consumer {consumer} batch {local}: {window.num_samples} samples, "
                                     f"{window.num_decoded} decoded, batch {params.batch_size}")
            key = (plan.global_batch_index(consumer, local), rank)
            if key in slices:
                raise AssertionError(f"global batch {key[0]} rank {rank}: yielded twice")
            slices[key] = (window.global_indices(offsets), window.padded_mask())
    if len(slices) != plan.num_global_batches * params.world_size:
        raise AssertionError(f"{len(slices)} slices for {plan.num_global_batches} global batches")
    batches = []
    for g in range(plan.num_global_batches):
        parts = [slices[(g, r)] for r in range(params.world_size)]
        batches.append((tuple(np.concatenate([p[0] for p in parts]).tolist()),
                        tuple(np.concatenate([p[1] for p in parts]).tolist())))
    return batches


def delivery_order(plan: GlobalOrderPlan, rank: int) -> list[int]:
    """The global batches rank ``rank``'s loop receives: DataLoader's in-order round robin over
    its workers, items of ``group`` batches, a worker out of items skipped (L4, X8)."""
    workers, group = plan.params.workers_per_rank, plan.group
    items = []
    for worker in range(workers):
        consumer = rank * workers + worker
        mine = [plan.global_batch_index(consumer, j) for j in range(plan.num_batches(consumer))]
        items.append([mine[i:i + group] for i in range(0, len(mine), group)])
    counts = [len(i) for i in items]
    if counts != sorted(counts, reverse=True) or (counts and counts[0] - counts[-1] > 1):
        raise AssertionError(f"rank {rank}: items per worker {counts} (exhausted workers must be the last ones)")
    rounds = max(counts, default=0)
    return [g for r in range(rounds) for w in range(workers) if r < counts[w] for g in items[w][r]]


def offsets_after(plan: GlobalOrderPlan, received: int) -> list[int]:
    """Per-consumer offsets once every rank's loop received global batches ``0:received``."""
    workers = plan.params.workers_per_rank
    return [units_below(received, c % workers, workers, plan.group) * plan.params.batch_size
            for c in range(plan.num_consumers)]


def saved(plan: GlobalOrderPlan, received: int) -> dict[str, Any]:
    """The state after ``received`` global batches, through a JSON round trip (R1)."""
    state = global_plan_to_state(plan, offsets_after(plan, received), FINGERPRINT)
    restored: dict[str, Any] = json.loads(json.dumps(state))
    if restored != state:
        raise AssertionError("state changed through JSON")
    return restored


def fresh(sizes: list[int], params: PlanParams, topology: Topology) -> GlobalOrderPlan:
    return build_global_plan(sizes, on(params, topology), None, topology.group)


def fixed_of(params: PlanParams, topology: Topology) -> PlanParams:
    return sequence_params(on(params, topology))
