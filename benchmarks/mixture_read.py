"""Mixture read throughput against one dataset of the same total size (issue target: >= 90 %).

    python -m benchmarks.mixture_read [--samples 40000] [--workers 0 2] [--reps 3]
    python -m benchmarks.mixture_read --sources 1 64 300 [--samples 40000] ...

Writes a 4-source mixture (70/15/10/5 % of ``--samples`` token samples, 128-1024 int32 tokens)
and one dataset holding all of them into a temp folder, then times one epoch of each through
``ShardLoader`` (batch 64, local files: the hot-cache case) at every ``--workers`` count
(default W=0 and W=2), the cases interleaved epoch by epoch so load drifts hit them alike.
Prints one JSON line per (case, workers): median samples/s over ``reps`` epochs, and the ratio
to the single dataset at the same W (the target: >= 0.9 for ``random`` and ``stratified``).

``--sources N …``: the same samples split into ``N`` equal sources instead (a ``stratified``
mixture at equal weights; ``N = 1`` is a one-source mixture), against the one dataset, to see
what the number of sources costs (target: 64 sources >= 0.9 of one dataset, W=0 and W=2;
specs/read-path.md RP1 bounds their open files). Cases ``sources-N``.
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


def named_sources(root: str, samples: int) -> tuple[list[sk.Source], int]:
    """The 4-source mix of SHARES, written under ``root``; its sources and total samples."""
    first, sources = 0, []
    for name, share in SHARES.items():
        count = int(samples * share)
        write(f"{root}/{name}", first, count)
        sources.append(sk.Source(f"{root}/{name}", share, name))
        first += count
    return sources, first


def equal_sources(root: str, samples: int, num_sources: int) -> list[sk.Source]:
    """``samples`` split into ``num_sources`` equal datasets (the first ones one larger)."""
    sources, first = [], 0
    for index in range(num_sources):
        count = samples // num_sources + (index < samples % num_sources)
        path = f"{root}/n{num_sources}/s{index}"
        write(path, first, count)
        sources.append(sk.Source(path, 1.0, f"s{index}"))
        first += count
    return sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sources", type=int, nargs="+", help="equal sources per case (see above)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        write(f"{root}/all", 0, args.samples)
        cases = {"single": lambda: sk.StreamingDataset(f"{root}/all", batch_size=BATCH)}
        if args.sources:
            for num_sources in args.sources:
                mix = sk.Mixture(equal_sources(root, args.samples, num_sources), samples_per_epoch=args.samples,
                                 composition="stratified")
                cases[f"sources-{num_sources}"] = lambda mix=mix: sk.StreamingDataset(mix, batch_size=BATCH)  # type: ignore[misc]
        else:
            sources, first = named_sources(root, args.samples)
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
