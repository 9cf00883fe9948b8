"""Hypothesis strategies and small materialising helpers for the plan tests.

Materialising a consumer's whole sequence is fine here (tests use N <= 1e5); the library
itself never does it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from shardkit.plan import Plan, PlanParams, build_plan, plan_to_state, shard_offsets, shard_order
from shardkit.plan.params import DEFAULT_SPREAD

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


def drawn_params(draw: st.DrawFn, top: tuple[int, int, int, int, int], window: int, fixed: dict[str, object]
                 ) -> PlanParams:
    """Params with seed, epoch, ranks, workers and batch drawn up to ``top`` (ranks and batch from 1), both tails,
    shuffled or not; ``fixed`` overrides any of them."""
    seed, epoch, ranks, workers, batch = top
    values: dict[str, object] = dict(
        seed=draw(st.integers(0, seed)), epoch=draw(st.integers(0, epoch)), world_size=draw(st.integers(1, ranks)),
        num_workers=draw(st.integers(0, workers)), batch_size=draw(st.integers(1, batch)),
        tail=draw(st.sampled_from(["drop", "pad"])), shuffle=draw(st.booleans()), shuffle_window=window)
    return PlanParams(**{**values, **fixed})  # type: ignore[arg-type]


@st.composite
def plan_params(draw: st.DrawFn, /, num_samples: int, **fixed: object) -> PlanParams:
    """Params over R 1-64, W 0-8, B 1-64, both tails, epochs 0-5, windows >= N/2000."""
    smallest_window = max(1, num_samples // 2000)
    window = draw(st.sampled_from([1, 3, 64, 1000, 8192]).map(lambda w: max(w, smallest_window)))
    return drawn_params(draw, (2**40, 5, 64, 8, 64), window, fixed)


@st.composite
def interleaved(draw: st.DrawFn, /, max_samples: int = 30_000) -> tuple[list[int], PlanParams]:
    """Shard sizes and shuffled params reading 2-1000 runs at once (interleave, P13)."""
    sizes = draw(shard_sizes(max_samples=max_samples))
    lanes = draw(st.sampled_from([2, 3, 8, 64, 1000]))
    return sizes, draw(plan_params(sum(sizes), shuffle=True, interleave=lanes))


@st.composite
def spread_cases(draw: st.DrawFn, /, max_samples: int = 30_000) -> tuple[list[int], PlanParams]:
    """Shard sizes and shuffled params spreading shards over consumers (spread, P18), some
    interleaved too."""
    sizes = draw(shard_sizes(max_samples=max_samples))
    lanes = draw(st.sampled_from([1, 1, 4]))
    spread = draw(st.sampled_from([2, 3, DEFAULT_SPREAD, 64]))
    return sizes, draw(plan_params(sum(sizes), shuffle=True, spread=spread, interleave=lanes))


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


def assert_level_steps(before: Plan, offsets: list[int], plan: Plan) -> None:
    """The level ``plan`` made elastically from ``before`` killed at ``offsets``: equal steps
    over its remainder (R4), or none at all when every consumer of ``before`` had run to its
    end (R10: the epoch is over, the remainder is the new level's drop)."""
    if all(offset >= before.num_samples(c) for c, offset in enumerate(offsets)):
        if plan.steps_per_rank != 0 or plan.num_dropped != plan.num_source_samples:
            raise AssertionError(f"a finished epoch's re-plan yields {plan.steps_per_rank} steps")
        return
    assert_equal_steps(plan, plan.num_source_samples)


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


# ---- property bodies shared by the read-time mixing tests (interleave P13, spread P18) --------

RESUME_FINGERPRINT = "xxh64:0123456789abcdef"


def check_exactly_once_pads_last(sizes: list[int], params: PlanParams) -> None:
    """P1-P4: every real sample at most once, the rest is the reported drop; pads come last."""
    plan = build_plan(sizes, params)
    outputs = all_samples(plan)
    real = np.concatenate([out.ids[~out.padded] for out in outputs])
    if not len(np.unique(real)) == len(real) == sum(sizes) - plan.num_dropped:
        raise AssertionError(f"real samples: {len(real)} ({len(np.unique(real))} distinct) of {sum(sizes)}")
    assert_equal_steps(plan, sum(sizes))
    for consumer, out in enumerate(outputs):
        real_count = plan.num_real_samples(consumer)
        if len(out.ids) != plan.num_samples(consumer) or out.padded[:real_count].any():
            raise AssertionError(f"consumer {consumer}: {len(out.ids)} samples, pads inside the real part")
        if not out.padded[real_count:].all():
            raise AssertionError(f"consumer {consumer}: a real sample after a pad")


def check_resume_exact(sizes: list[int], params: PlanParams, seed: int) -> dict[str, Any]:
    """P5/P9/R2: deterministic; a seek or a same-topology resume yields exactly the rest of each
    sequence. Returns the (JSON round-tripped) state."""
    plan = build_plan(sizes, params)
    offsets = kill_offsets(plan, seed)
    state: dict[str, Any] = json.loads(json.dumps(plan_to_state(plan, offsets, RESUME_FINGERPRINT)))
    resumed, again = build_plan(sizes, params, state), build_plan(sizes, params)
    for consumer in range(min(plan.num_consumers, 8)):
        whole = consumer_samples(plan, consumer)
        rest = consumer_samples(resumed, consumer, offsets[consumer])
        if not np.array_equal(consumer_samples(again, consumer).ids, whole.ids):
            raise AssertionError(f"consumer {consumer}: the same params gave another sequence")
        tail = slice(offsets[consumer], None)
        if not (np.array_equal(rest.ids, whole.ids[tail]) and np.array_equal(rest.padded, whole.padded[tail])):
            raise AssertionError(f"consumer {consumer}: resumed at {offsets[consumer]}, not the rest")
    return state


def check_elastic_exactly_once(sizes: list[int], params: PlanParams, other: PlanParams, seed: int) -> None:
    """R3-R5: killed mid-epoch and resumed with ``other``, every sample is delivered once over
    both levels, except the new level's reported drop."""
    plan = build_plan(sizes, params)
    offsets = kill_offsets(plan, seed)
    state = json.loads(json.dumps(plan_to_state(plan, offsets, RESUME_FINGERPRINT)))
    after = build_plan(sizes, other, state)
    later = [out.ids[~out.padded] for out in all_samples(after)] + [np.zeros(0, dtype=np.int64)]
    both = np.concatenate([consumed_real(plan, offsets), *later])
    if len(np.unique(both)) != len(both):
        raise AssertionError("a sample delivered twice over the two levels")
    if not other.same_partition(params) and len(both) != sum(sizes) - after.num_dropped:
        raise AssertionError(f"{len(both)} delivered, expected {sum(sizes) - after.num_dropped}")


def check_default_is_plain(knob: str) -> tuple[list[int], PlanParams, Plan]:
    """``knob`` at 1 (its default) leaves plans and saved states exactly as before: the saved
    params omit it and load back equal, and setting it to 1 changes no consumer's samples.
    Returns the sizes, the params and the plain plan it checked, for further checks."""
    params = PlanParams(seed=3, world_size=2, num_workers=2, batch_size=4, shuffle_window=16)
    assert knob not in params.to_dict()
    assert PlanParams.from_dict(params.to_dict()) == params
    sizes = [40, 7, 0, 90, 33]
    plain = build_plan(sizes, params)
    explicit = build_plan(sizes, PlanParams(**{**params.to_dict(), knob: 1}))
    for consumer in range(plain.num_consumers):
        assert np.array_equal(consumer_samples(plain, consumer).ids, consumer_samples(explicit, consumer).ids)
    return sizes, params, plain
