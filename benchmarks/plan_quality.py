"""Batch diversity from the plan alone (specs/partition.md, "Shuffle quality"; no data read, no
timing): distinct labels per local batch of sorted datasets against a uniform shuffle.

    python -m benchmarks.plan_quality [--out benchmarks/results/plan_quality.jsonl] [--markdown]

Labels are a function of the manifest-order index: sorted by class, or permuted exactly as
``shardkit pack`` (shuffled, seed 0) would permute them (sort by ``sort_keys``). Each figure is
the plan's exact output (seed 0, epoch 0) averaged over up to 64 consumers' first 20 batches;
the uniform reference is the exact expectation. Reads: the old default (spread 1), the new
default (spread 12, specs/partition.md P18), larger windows, interleave, and a pack-shuffled set.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from shardkit.plan import PlanParams, build_plan
from shardkit.plan.params import DEFAULT_SPREAD
from shardkit.plan.quality import label_quality
from shardkit.write.shuffle import sort_keys

BATCH = 256
DATASETS = [  # (name, classes, samples per class, samples per shard; 0 = one shard)
    ("1000 classes x 100, 214/shard", 1000, 100, 214),
    ("1000 classes x 214, 214/shard", 1000, 214, 214),
    ("1000 classes x 1281, 214/shard", 1000, 1281, 214),
    ("1000 classes x 1281, 1000/shard", 1000, 1281, 1000),
    ("100 classes x 2000, 500/shard", 100, 2000, 500),
    ("100 classes x 2000, 2000/shard", 100, 2000, 2000),
    ("100 classes x 2000, one shard", 100, 2000, 0),
]
TOPOLOGIES = [(1, 1), (8, 4), (32, 8)]
READS = [  # (pack shuffled, shuffle_window, interleave, spread)
    (False, 8192, 1, 1), (False, 8192, 1, DEFAULT_SPREAD), (False, 65536, 1, 1),
    (False, 65536, 1, DEFAULT_SPREAD), (False, 8192, 64, DEFAULT_SPREAD), (True, 8192, 1, DEFAULT_SPREAD),
]


def _sizes(total: int, per_shard: int) -> list[int]:
    if per_shard == 0:
        return [total]
    return [per_shard] * (total // per_shard) + ([total % per_shard] if total % per_shard else [])


def measure(name: str, classes: int, per_class: int, per_shard: int) -> list[dict[str, Any]]:
    total = classes * per_class
    sorted_labels = np.arange(total) // per_class
    shuffled = sorted_labels[np.argsort(sort_keys(0, 0, total))]
    rows = []
    for world, workers in TOPOLOGIES:
        for packed, window, lanes, spread in READS:
            params = PlanParams(world_size=world, num_workers=workers, batch_size=BATCH,
                                shuffle_window=window, interleave=lanes, spread=spread)
            plan = build_plan(_sizes(total, per_shard), params)
            quality = label_quality(plan, shuffled if packed else sorted_labels, "label")
            rows.append({"bench": "plan_quality", "dataset": name, "samples": total,
                         "ranks": world, "workers": workers, "pack_shuffle": packed,
                         "shuffle_window": window, "interleave": lanes, "spread": spread,
                         "distinct": round(quality.distinct, 1), "uniform": round(quality.uniform, 1),
                         "ratio": round(quality.ratio, 3)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _read_name(packed: bool, window: int, lanes: int, spread: int) -> str:
    if packed:
        return "pack-shuffled, defaults"
    name = f"win {window}, spread {spread}" + (f", interleave {lanes}" if lanes > 1 else "")
    return name + (" (old default)" if (window, lanes, spread) == (8192, 1, 1) else "") + (
        " (default)" if (window, lanes, spread) == (8192, 1, DEFAULT_SPREAD) else "")


def markdown(rows: list[dict[str, Any]]) -> str:
    """One row per dataset and topology, one column per read: distinct (ratio to uniform)."""
    reads = [_read_name(*read) for read in READS]
    lines = ["| dataset (sorted) | R×W | uniform | " + " | ".join(reads) + " |",
             "|---|---|---|" + "---|" * len(reads)]
    cells: dict[tuple[str, int, int], dict[str, str]] = {}
    for r in rows:
        key = (r["dataset"], r["ranks"], r["workers"])
        read = _read_name(r["pack_shuffle"], r["shuffle_window"], r["interleave"], r["spread"])
        cells.setdefault(key, {"uniform": str(r["uniform"])})[read] = f"{r['distinct']} ({r['ratio']:.0%})"
    for (dataset, ranks, workers), by_read in cells.items():
        lines.append(f"| {dataset} | {ranks}×{workers} | {by_read['uniform']} | "
                     + " | ".join(by_read.get(read, "") for read in reads) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    args = parser.parse_args(argv)
    rows = [row for dataset in DATASETS for row in measure(*dataset)]
    if args.out:
        with open(args.out, "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
    if args.markdown:
        print(markdown(rows))


if __name__ == "__main__":
    main()
