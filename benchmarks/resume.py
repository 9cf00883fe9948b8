"""Resume cost (target T4, benchmarks/RESUME.md): time to the first batch after a resume at 10%, 50% and 90%
of an epoch against a fresh start (no replay), and plan/re-plan cost at the P4 scale.

    python -m benchmarks.resume [--samples 200000] [--workers 2] [--out benchmarks/results/resume.jsonl]

Prints JSON lines; each figure is the median of 3 runs in this process (no other load control).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from typing import Any

import numpy as np

import shardkit as sk
from benchmarks.jsonl import save_rows
from shardkit.plan import PlanParams, build_plan, plan_to_state

BATCH = 64


def _dataset(path: str, samples: int) -> None:
    rng = np.random.default_rng(0)
    with sk.ShardWriter(path, shard_size="16MiB") as writer:
        for i in range(samples):
            writer.write({"id": i, "tokens": rng.integers(0, 50_000, int(rng.integers(128, 1025)), dtype=np.int32)})


def _first_batch(path: str, workers: int, state: dict[str, Any] | None) -> float:
    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=BATCH, shuffle=True), num_workers=workers)
    if state is not None:
        loader.load_state_dict(state)
    started = time.perf_counter()
    next(iter(loader))
    return time.perf_counter() - started


def _state_at(path: str, fraction: float) -> dict[str, Any]:
    """A loader state as if ``fraction`` of the epoch was consumed (built from the pure plan)."""
    dataset = sk.StreamingDataset(path, batch_size=BATCH, shuffle=True)
    loader = sk.ShardLoader(dataset)
    plan = dataset.plan(0, 1, 0)
    offset = int(plan.num_batches(0) * fraction) * BATCH
    return {"version": 1, "kind": "shardkit.loader", "epoch": 0, "steps": offset // BATCH,
            "plan": plan_to_state(plan, [offset], loader.streaming.fingerprint)}


def resume_rows(samples: int, workers: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        _dataset(tmp, samples)
        for label, fraction in (("fresh", None), ("10%", 0.1), ("50%", 0.5), ("90%", 0.9)):
            state = None if fraction is None else _state_at(tmp, fraction)
            times = [_first_batch(tmp, workers, state) for _ in range(3)]
            rows.append({"event": "resume_first_batch", "at": label, "workers": workers, "samples": samples,
                         "seconds_median": statistics.median(times), "seconds": times})
    return rows


def scale_rows(interleave: int = 1) -> list[dict[str, Any]]:
    """P4: 1e9 samples in 1e5 shards, 4096 consumers: build, seek, elastic re-plan
    (``interleave``: read-time lanes, partition.md P13)."""
    sizes = np.full(100_000, 10_000, dtype=np.int64)
    params = PlanParams(world_size=512, num_workers=8, batch_size=32, epoch=0, interleave=interleave)
    tracemalloc.start()
    started = time.perf_counter()
    plan = build_plan(sizes, params)
    built = time.perf_counter()
    offsets = [plan.num_batches(c) // 2 * 32 for c in range(plan.num_consumers)]
    state = plan_to_state(plan, offsets, "fp")
    seek = next(iter(plan.consumer_windows(4095, offsets[4095])))
    sought = time.perf_counter()
    elastic = build_plan(sizes, PlanParams(world_size=384, num_workers=6, batch_size=32, epoch=0), state)
    next(iter(elastic.consumer_windows(2303, 0)))
    replanned = time.perf_counter()
    shards = plan.shards_of(4095, offsets[4095])
    listed = time.perf_counter()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return [{"event": "plan_scale", "interleave": interleave, "shards_of_s": listed - replanned,
             "shards_of_len": len(shards),
             "samples": int(sizes.sum()), "shards": len(sizes), "consumers": plan.num_consumers,
             "build_s": built - started, "seek_s": sought - built, "elastic_replan_s": replanned - sought,
             "window_samples": int(seek.num_samples), "peak_traced_mib": peak / (1 << 20)}]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument("--interleave", type=int, default=1, help="plan with read-time lanes (P13)")
    parser.add_argument("--plan-only", action="store_true", help="only the plan-scale rows (no dataset)")
    args = parser.parse_args()
    rows = scale_rows(args.interleave)
    save_rows(rows if args.plan_only else rows + resume_rows(args.samples, args.workers), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
