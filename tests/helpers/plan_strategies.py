"""Hypothesis strategies and small materialising helpers for the plan tests.

Materialising a consumer's whole sequence is fine here (tests use N <= 1e5); the library
itself never does it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from shardkit.plan import Plan, PlanParams, shard_offsets, shard_order

MAX_SAMPLES = 100_000
MAX_SHARDS = 500


@st.composite
def shard_sizes(draw: st.DrawFn, /, max_samples: int = MAX_SAMPLES) -> list[int]:
    """1-500 shards (sometimes 0), skewed sizes, empty shards, N up to ``max_samples``."""
    if draw(st.booleans()):  # small, fully shrinkable cases
        return draw(st.lists(st.integers(0, 12), min_size=0, max_size=12))
    num_shards = draw(st.integers(1, MAX_SHARDS))
    total = draw(st.integers(0, max_samples))
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["uniform", "skewed", "sparse"]))
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        weights = np.ones(num_shards)
    elif kind == "skewed":
        weights = rng.pareto(0.8, num_shards) + 1e-3
    else:
        weights = rng.random(num_shards) * (rng.random(num_shards) < 0.3)
    if weights.sum() == 0:
        weights[0] = 1.0
    sizes = np.floor(weights / weights.sum() * total).astype(np.int64)
    return [int(size) for size in sizes]


@st.composite
def plan_params(draw: st.DrawFn, /, num_samples: int, **fixed: object) -> PlanParams:
    """Params over R 1-64, W 0-8, B 1-64, both tails, epochs 0-5, windows >= N/2000."""
    smallest_window = max(1, num_samples // 2000)
    window = draw(st.sampled_from([1, 3, 64, 1000, 8192]).map(lambda w: max(w, smallest_window)))
    values: dict[str, object] = {
        "seed": draw(st.integers(0, 2**40)),
        "epoch": draw(st.integers(0, 5)),
        "world_size": draw(st.integers(1, 64)),
        "num_workers": draw(st.integers(0, 8)),
        "batch_size": draw(st.integers(1, 64)),
        "tail": draw(st.sampled_from(["drop", "pad"])),
        "shuffle": draw(st.booleans()),
        "shuffle_window": window,
    }
    values.update(fixed)
    return PlanParams(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Samples:
    """A consumer's output: manifest-order global indices and pad flags, in output order."""

    ids: np.ndarray
    padded: np.ndarray


def consumer_samples(plan: Plan, consumer: int, start: int = 0) -> Samples:
    """Everything ``consumer_windows(consumer, start)`` outputs, concatenated."""
    offsets = plan.shard_offsets
    ids: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    padded: list[np.ndarray] = [np.zeros(0, dtype=bool)]
    for window in plan.consumer_windows(consumer, start):
        ids.append(window.global_indices(offsets))
        padded.append(window.padded_mask())
    return Samples(np.concatenate(ids), np.concatenate(padded))


def epoch_ids(sizes: list[int], params: PlanParams) -> np.ndarray:
    """The level-0 epoch sequence materialised: global indices, shards in epoch order."""
    offsets = shard_offsets(sizes)
    runs = [np.arange(offsets[s], offsets[s + 1]) for s in shard_order(len(sizes), params)]
    return np.concatenate(runs + [np.zeros(0, dtype=np.int64)]).astype(np.int64)


def all_samples(plan: Plan) -> list[Samples]:
    return [consumer_samples(plan, consumer) for consumer in range(plan.num_consumers)]


def kill_offsets(plan: Plan, seed: int) -> list[int]:
    """Random kill points: per consumer a multiple of the batch size in start_offsets[c]..n_c.

    A third of the consumers stop where they started, a third ran to the end, the rest at
    a uniform batch in between.
    """
    rng = np.random.default_rng(seed)
    batch = plan.params.batch_size
    offsets = []
    for consumer in range(plan.num_consumers):
        first = plan.start_offsets[consumer] // batch
        last = plan.num_batches(consumer)
        kind = rng.integers(0, 3)
        done = first if kind == 0 else last if kind == 1 else int(rng.integers(first, last + 1))
        offsets.append(done * batch)
    return offsets


def consumed_real(plan: Plan, offsets: list[int]) -> np.ndarray:
    """Real (non-pad) samples consumers delivered between start_offsets and ``offsets``."""
    found = [np.zeros(0, dtype=np.int64)]
    for consumer, offset in enumerate(offsets):
        start = plan.start_offsets[consumer]
        out = consumer_samples(plan, consumer, start)
        delivered = slice(0, offset - start)
        found.append(out.ids[delivered][~out.padded[delivered]])
    return np.concatenate(found)


def assert_equal_steps(plan: Plan, num_source: int) -> None:
    """P2/P3 for any level: equal steps per rank over ``num_source`` samples, minimal tail."""
    params = plan.params
    per_step = params.world_size * params.batch_size
    expected = num_source // per_step if params.tail == "drop" else -(-num_source // per_step)
    if plan.steps_per_rank != expected:
        raise AssertionError(f"steps_per_rank {plan.steps_per_rank}, expected {expected}")
    workers = params.workers_per_rank
    for rank in range(params.world_size):
        batches = [plan.num_batches(rank * workers + worker) for worker in range(workers)]
        if sum(batches) != expected or max(batches) - min(batches) > 1:
            raise AssertionError(f"rank {rank}: batches per worker {batches}, steps {expected}")
    if not (plan.num_dropped < per_step and plan.num_padded < per_step):
        raise AssertionError(f"tail not minimal: {plan.num_dropped=} {plan.num_padded=}")
