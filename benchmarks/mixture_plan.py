"""Mixture plan cost (specs/mixture.md, "Cost"): a 16-source mixture totalling 1e9 samples in
1e5 shards for 4,096 consumers - plan, seek, save, elastic re-plan, and a resume with new
weights (the started epoch re-planned on another topology, the next epoch under the new mix);
an epoch whose mix changes at 3 steps inside it (MX11); and a resume whose new weights re-plan
the rest of the started epoch now (MX12: lazy, O(consumers x sources) plus, for ``random``, one
pass over the Philox stream of each window a range cuts; on ``--remix-samples``, default
``--samples``), with a seek into its last consumer, its first windows read and a consumer's
shard list (what a reader with a cache asks first), for both compositions.

    python -m benchmarks.mixture_plan [--reps 3] [--samples 1e9] [--remix-samples 1e9]

Prints one JSON line per step: median seconds (wall clock and process CPU time) over ``reps``
and the peak traced memory (tracemalloc, MiB) of one run of that step. Pure plan arithmetic: no data is read.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from shardkit.plan import PlanParams
from shardkit.plan.mixture.spec import MixSource, MixSpec, ScheduleStep
from shardkit.plan.mixture.state import mixture_plan, mixture_to_state, resume_mixture

NUM_SOURCES, NUM_SHARDS, NUM_SAMPLES = 16, 100_000, 10**9


def sources(weights: list[float], total: int = NUM_SAMPLES) -> tuple[MixSource, ...]:
    """16 sources of skewed sizes: 1e5 shards and ``total`` samples (1e9) in all."""
    rng = np.random.default_rng(0)
    shard_split = np.diff(np.linspace(0, NUM_SHARDS, NUM_SOURCES + 1).astype(np.int64))
    sizes = rng.integers(0, 2 * total // NUM_SHARDS, NUM_SHARDS)
    sizes[-1] += total - int(sizes.sum())
    parts = np.split(sizes, np.cumsum(shard_split)[:-1])
    return tuple(MixSource(f"s{i}", part, w, f"fp{i}") for i, (part, w) in enumerate(zip(parts, weights, strict=True)))


def measure(name: str, reps: int, step: Callable[[], Any], **extra: Any) -> Any:
    times, cpu = [], []
    for _ in range(reps):
        started, cpu_started = time.perf_counter(), time.process_time()
        result = step()
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    tracemalloc.start()
    step()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({"bench": "mixture_plan", "step": name, "seconds": round(statistics.median(times), 4),
                      "cpu_seconds": round(statistics.median(cpu), 4),
                      "peak_mib": round(peak / 2**20, 1), **extra}), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--samples", type=float, default=NUM_SAMPLES)
    parser.add_argument("--remix-samples", type=float, default=None, help="default: --samples")
    args = parser.parse_args(argv)
    total = int(args.samples)
    weights = [float(w) for w in np.geomspace(1.0, 0.01, NUM_SOURCES)]
    spec = MixSpec(sources(weights, total), total, "stratified")
    params = PlanParams(seed=7, epoch=3, world_size=512, num_workers=8, batch_size=32)
    plan = measure("plan", args.reps, lambda: mixture_plan(spec, params))
    last = plan.num_consumers - 1
    middle = plan.num_samples(last) // 2 // 32 * 32
    measure("seek_window", args.reps, lambda: next(plan.consumer_windows(last, middle)))
    offsets = [plan.num_samples(c) // 2 // 32 * 32 for c in range(plan.num_consumers)]
    state = measure("save_state", args.reps, lambda: mixture_to_state(spec, plan, offsets))
    elastic = PlanParams(seed=7, epoch=3, world_size=300, num_workers=6, batch_size=48)
    measure("elastic_replan", args.reps, lambda: resume_mixture(spec, elastic, state))
    new_spec = MixSpec(sources(weights[::-1], total), total, "stratified")
    resumed, later = measure("new_weights_resume", args.reps, lambda: resume_mixture(new_spec, elastic, state))
    next_params = PlanParams(**(elastic.to_dict() | {"epoch": 4}))
    measure("next_epoch_new_mix", args.reps, lambda: mixture_plan(later, next_params))
    per_step = params.world_size * params.batch_size
    steps = total // per_step
    changes = tuple(ScheduleStep(3, tuple(weights[k:] + weights[:k]), steps * k // 4 * per_step) for k in (1, 2, 3))
    segmented = MixSpec(spec.sources, total, "stratified", changes)
    plan = measure("plan_segmented", args.reps, lambda: mixture_plan(segmented, params))
    measure("seek_window_segmented", args.reps, lambda: next(plan.consumer_windows(last, middle)))
    for composition in ("stratified", "random"):
        remix_now(int(args.remix_samples or total), weights, params, elastic, args.reps, composition)
    return 0


def remix_now(total: int, weights: list[float], params: PlanParams, elastic: PlanParams, reps: int,
              composition: str) -> None:
    """New weights for the rest of a half-consumed epoch of ``total`` samples (MX12), then a
    seek into the re-planned rest and its first 4 windows (what reading the remix adds)."""
    spec = MixSpec(sources(weights, total), total, composition)
    plan = mixture_plan(spec, params)
    state = mixture_to_state(spec, plan, [plan.num_samples(c) // 2 // 32 * 32 for c in range(plan.num_consumers)])
    new_spec = MixSpec(sources(weights[::-1], total), total, composition)
    extra = {"samples": total, "composition": composition}
    rest, _ = measure("new_weights_now", reps, lambda: resume_mixture(new_spec, elastic, state, apply="now"), **extra)
    last = rest.num_consumers - 1
    middle = rest.num_samples(last) // 2 // elastic.batch_size * elastic.batch_size
    measure("seek_window_remixed", reps, lambda: next(rest.consumer_windows(last, middle)), **extra)
    measure("read_4_windows_remixed", reps, lambda: list(itertools.islice(rest.consumer_windows(0), 4)), **extra)
    measure("shards_of_remixed", reps, lambda: rest.shards_of(last), **extra)  # a reader's prefetch list


if __name__ == "__main__":
    raise SystemExit(main())
