"""Batch diversity from the plan alone (specs/partition.md, "Shuffle quality"; no data read, no
timing): distinct labels per local batch of sorted datasets against a uniform shuffle.

    python -m benchmarks.plan_quality [--out benchmarks/results/plan_quality.jsonl] [--markdown]

Labels are a function of the manifest-order index: sorted by class, or permuted exactly as
``shardkit pack`` (shuffled, seed 0) would permute them (sort by ``sort_keys``). Each figure is
the mean over up to 64 consumers' first 20 batches.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from shardkit.plan import PlanParams, build_plan
from shardkit.plan.quality import label_quality
from shardkit.write.shuffle import sort_keys

BATCH = 256
DATASETS = [  # (name, classes, samples per class, samples per shard; 0 = one shard)
    ("1000 classes x 128, 214/shard", 1000, 128, 214),
    ("1000 classes x 1281, 214/shard", 1000, 1281, 214),
    ("100 classes x 2000, 2000/shard", 100, 2000, 2000),
    ("100 classes x 2000, one shard", 100, 2000, 0),
]
TOPOLOGIES = [(1, 1), (8, 4), (32, 8)]
READS = [  # (pack shuffled, shuffle_window, interleave)
    (False, 8192, 1), (False, 65536, 1), (False, 8192, 16), (False, 8192, 64), (False, 65536, 64),
    (True, 8192, 1),
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
        for packed, window, lanes in READS:
            params = PlanParams(world_size=world, num_workers=workers, batch_size=BATCH,
                                shuffle_window=window, interleave=lanes)
            plan = build_plan(_sizes(total, per_shard), params)
            quality = label_quality(plan, shuffled if packed else sorted_labels, "label")
            rows.append({"bench": "plan_quality", "dataset": name, "samples": total,
                         "ranks": world, "workers": workers, "pack_shuffle": packed,
                         "shuffle_window": window, "interleave": lanes,
                         "distinct": round(quality.distinct, 1), "uniform": round(quality.uniform, 1),
                         "ratio": round(quality.ratio, 3)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| dataset | R×W | pack | window | interleave | distinct / uniform | ratio |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['ranks']}×{r['workers']} | "
                     f"{'shuffled' if r['pack_shuffle'] else 'source order'} | {r['shuffle_window']} | "
                     f"{r['interleave']} | {r['distinct']} / {r['uniform']} | {r['ratio']:.0%} |")
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
