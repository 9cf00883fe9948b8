"""Mixture read throughput against one dataset of the same total size (issue target: >= 90 %).

    python -m benchmarks.mixture_read [--samples 40000] [--workers 0 2] [--reps 3]

Writes a 4-source mixture (70/15/10/5 % of ``--samples`` token samples, 128-1024 int32 tokens)
and one dataset holding all of them into a temp folder, then times one epoch of each through
``ShardLoader`` (batch 64, local files: the hot-cache case) at every ``--workers`` count
(default W=0 and W=2), the cases interleaved epoch by epoch so load drifts hit them alike.
Prints one JSON line per (case, workers): median samples/s over ``reps`` epochs, and the ratio
to the single dataset at the same W (the target: >= 0.9 for ``random`` and ``stratified``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import numpy as np

import shardkit as sk

SHARES = {"web": 0.70, "code": 0.15, "books": 0.10, "math": 0.05}
BATCH = 64


def write(path: str, first: int, count: int) -> None:
    rng = np.random.default_rng(first)
    with sk.ShardWriter(path, shard_size="8MiB") as writer:
        for i in range(first, first + count):
            writer.write({"id": i, "tokens": rng.integers(0, 50_000, int(rng.integers(128, 1025)), dtype=np.int32)})


def epoch_rate(dataset: sk.StreamingDataset, workers: int, epoch: int) -> float:
    loader = sk.ShardLoader(dataset, num_workers=workers)
    loader.set_epoch(epoch)
    started = time.perf_counter()
    count = sum(len(batch["id"]) for batch in loader)
    return count / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        write(f"{root}/all", 0, args.samples)
        first, sources = 0, []
        for name, share in SHARES.items():
            count = int(args.samples * share)
            write(f"{root}/{name}", first, count)
            sources.append(sk.Source(f"{root}/{name}", share, name))
            first += count
        cases = {"single": lambda: sk.StreamingDataset(f"{root}/all", batch_size=BATCH)}
        for composition in ("random", "stratified"):
            mix = sk.Mixture(sources, samples_per_epoch=first, composition=composition)
            cases[composition] = lambda mix=mix: sk.StreamingDataset(mix, batch_size=BATCH)  # type: ignore[misc]
        for workers in args.workers:
            runs: dict[str, list[float]] = {name: [] for name in cases}
            for epoch in range(args.reps):
                for name, make in cases.items():
                    runs[name].append(epoch_rate(make(), workers, epoch))
            rates = {name: statistics.median(values) for name, values in runs.items()}
            for name, rate in rates.items():
                print(json.dumps({"bench": "mixture_read", "case": name, "workers": workers,
                                  "samples_per_s": round(rate), "ratio_to_single": round(rate / rates["single"], 3)}),
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
