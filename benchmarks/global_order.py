"""What global order costs in reads, counted from the plans alone (specs/partition.md P32; no data
read, no timing).

    python -m benchmarks.global_order [--out benchmarks/results/global_order.jsonl] [--markdown]

For each topology, per consumer over its first ``n`` batches: the distinct shards it decodes,
the samples it decodes, and the runs (spans) they come in; and per shard touched in those
batches, how many consumers decode it. Orders: the default (``order="shard"``, spread 1 and the
loader's spread 12), ``order="global"`` (rows of a global batch sorted by index, P28) and, to
show why rows are sorted, the same global batches with rows in sequence order.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardkit.plan import PlanParams, Window, build_plan
from shardkit.plan.global_order.order import GlobalOrderPlan
from shardkit.plan.global_order.rows import RowCursor, rows_window
from shardkit.plan.global_order.state import build_global_plan
from shardkit.plan.params import DEFAULT_SPREAD

SHARDS, PER_SHARD, BATCH, WINDOW = 2000, 500, 32, 8192  # 1e6 samples
TOPOLOGIES = [(1, 4), (8, 4), (32, 8)]
BATCHES = [1, 10, 100]


def _default_windows(plan: Any, consumer: int, batches: int) -> Iterator[Window]:
    """Windows the reader decodes for the consumer's first ``batches`` batches (whole windows)."""
    left = batches * plan.params.batch_size
    for window in plan.consumer_windows(consumer):
        if left <= 0:
            return
        yield window
        left -= window.num_samples


def _global_windows(plan: GlobalOrderPlan, consumer: int, batches: int, sort: bool) -> Iterator[Window]:
    if sort:
        for index, window in enumerate(plan.consumer_windows(consumer)):
            if index == batches:
                return
            yield window
        return
    rank, _ = plan.rank_worker(consumer)
    size, batch = plan.params.global_batch_size, plan.params.batch_size
    cursor = RowCursor(plan.sequence, len(plan.sequence))
    for local in range(min(batches, plan.num_batches(consumer))):
        lo = plan.start + plan.global_batch_index(consumer, local) * size + rank * batch
        yield rows_window(cursor.take(lo, lo + batch))


def _count(windows_of: Any, consumers: range, workers: int, batches: int) -> dict[str, float]:
    shards, decoded, runs = [], [], []
    readers: dict[int, set[int]] = defaultdict(set)
    for consumer in consumers:
        mine: set[int] = set()
        samples = spans = 0
        for window in windows_of(consumer, batches):
            mine.update(s.shard_index for s in window.spans)
            samples += window.num_decoded
            spans += len(window.spans)
        for shard in mine:
            readers[shard].add(consumer)
        shards.append(len(mine))
        decoded.append(samples / (batches * BATCH))
        runs.append(spans / batches)
    return {"shards_per_consumer": float(np.mean(shards)), "decoded_per_yielded": float(np.mean(decoded)),
            "spans_per_batch": float(np.mean(runs)),
            "readers_per_shard": float(np.mean([len(r) for r in readers.values()])),
            "ranks_per_shard": float(np.mean([len({c // workers for c in r}) for r in readers.values()]))}


def measure(world: int, workers: int) -> list[dict[str, Any]]:
    sizes = [PER_SHARD] * SHARDS
    base = PlanParams(world_size=world, num_workers=workers, batch_size=BATCH, shuffle_window=WINDOW)
    consumers = range(base.num_consumers)  # every consumer: readers per shard counts them all
    spread1 = build_plan(sizes, base)
    spread12 = build_plan(sizes, PlanParams(**{**base.to_dict(), "spread": DEFAULT_SPREAD}))
    global_plan = build_global_plan(sizes, PlanParams(**{**base.to_dict(), "order": "global"}))
    orders = {
        "shard, spread 1": lambda c, n: _default_windows(spread1, c, n),
        f"shard, spread {DEFAULT_SPREAD}": lambda c, n: _default_windows(spread12, c, n),
        "global (rows sorted)": lambda c, n: _global_windows(global_plan, c, n, True),
        "global (rows unsorted)": lambda c, n: _global_windows(global_plan, c, n, False),
    }
    rows = []
    for batches in BATCHES:
        for order, windows_of in orders.items():
            rows.append({"bench": "global_order", "topology": f"{world}x{workers}", "order": order,
                         "batches": batches, "shards": SHARDS, "per_shard": PER_SHARD, "batch": BATCH,
                         "window": WINDOW, **_count(windows_of, consumers, base.workers_per_rank, batches)})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| R×W | order | batches | shards per consumer | spans per batch | consumers per shard "
             "| ranks per shard |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['topology']} | {row['order']} | {row['batches']} | {row['shards_per_consumer']:.1f} | "
                     f"{row['spans_per_batch']:.1f} | {row['readers_per_shard']:.2f} | {row['ranks_per_shard']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="append JSON lines here")
    parser.add_argument("--markdown", action="store_true", help="print a table instead of JSON lines")
    args = parser.parse_args()
    rows = [row for world, workers in TOPOLOGIES for row in measure(world, workers)]
    if args.out:
        with open(args.out, "a", encoding="utf-8") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)
    print(markdown(rows) if args.markdown else "\n".join(json.dumps(row) for row in rows))


if __name__ == "__main__":
    main()
