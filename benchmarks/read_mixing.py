"""Read cost of a dataset packed in source order, read-time mixing on vs off (specs/partition.md
P18, P21): does the default ``spread`` cost read speed?

    python -m benchmarks.read_mixing [--classes 1000] [--per-class 100] [--sample-bytes 16384]
        [--shard-size 16MiB] [--block-size 256KiB] [--payload random|repeated]
        [--world-size 8] [--workers 4] [--batch-size 256] [--repeats 3] [--measure loader reader]
        [--against /path/to/other/checkout] [--root bench-data/read_mixing]

Packs once (kept under ``--root``; labels sorted, recorded as source order), then reads rank 0's
share of a ``--world-size`` job three ways, interleaved ``--repeats`` times: ``spread=12`` (the
default), ``spread=1``, ``shuffle=False``. Each read runs in a fresh process; ``--against TREE``
runs every read a second time, right after, with ``shardkit`` imported from TREE (e.g. main), so
before/after ratios come from back-to-back pairs. Two measures:

* ``loader``: ``ShardLoader`` with ``--workers`` workers. Steady samples/s (after the first
  batch), epoch samples/s (from ``iter``), distinct labels per batch, and ``decoded_ratio``:
  bytes decompressed per payload byte delivered (1.0: nothing decoded twice).
* ``reader``: rank 0's consumers read one after another in one process, no DataLoader, timed in
  CPU seconds (``cpu_us_per_sample``), which a loaded machine disturbs far less than wall time.

The default shape keeps the writer's default 64 storage blocks per shard (16 MiB shards of
256 KiB blocks, ~1,000 samples and 98 shards; 100k samples in 1,000 classes) with incompressible
payloads (stored raw, as JPEG). ``--classes 200 --per-class 200 --shard-size 4MiB --block-size
1MiB --payload repeated`` is the earlier, adversarial shape: 4 blocks per shard (a spread span of
21 samples inside blocks of 64), one payload repeated (zstd blocks). Timings need a quiet
machine; distinct labels and ``decoded_ratio`` do not.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MODES = {  # name: StreamingDataset keyword arguments
    "spread-12 (default)": {"shuffle": True, "spread": 12},
    "spread-1": {"shuffle": True, "spread": 1},
    "no-shuffle": {"shuffle": False},
}
TREE = str(Path(__file__).resolve().parents[1])  # the checkout this file belongs to


def pack(root: Path, args: argparse.Namespace) -> str:
    import shardkit as sk

    name = (f"sorted-{args.classes}x{args.per_class}-{args.sample_bytes}B-{args.payload}"
            f"-{args.shard_size}-{args.block_size}")
    path = root / name
    if (path / "manifest.json").exists():
        return str(path)
    rng = np.random.default_rng(0)
    repeated = rng.bytes(args.sample_bytes)
    with sk.ShardWriter(str(path), shard_size=args.shard_size, block_size=args.block_size) as writer:
        writer.order = {"shuffled": False}
        for index in range(args.classes * args.per_class):
            payload = repeated if args.payload == "repeated" else rng.bytes(args.sample_bytes)
            writer.write({"id": index, "label": index // args.per_class, "jpg": payload})
    return str(path)


def _num_bytes(column: Any) -> int:
    if hasattr(column, "values"):
        return int(column.values.numel() if hasattr(column.values, "numel") else len(column.values))
    return sum(len(value) for value in column)


def read_loader(path: str, mode: str, job: dict[str, int]) -> dict[str, Any]:
    import shardkit as sk

    dataset = sk.StreamingDataset(path, batch_size=job["batch_size"], **MODES[mode])  # type: ignore[arg-type]
    dataset.options = dataclasses.replace(dataset.options, rank=0, world_size=job["world_size"])
    loader = sk.ShardLoader(dataset, num_workers=job["workers"])
    distinct: list[int] = []
    samples = payload = 0
    t0 = time.perf_counter()
    t_first = 0.0
    for batch in loader:
        labels = np.asarray(batch["label"])
        if not distinct:
            t_first = time.perf_counter()
        else:
            samples += len(labels)
        distinct.append(len(np.unique(labels)))
        payload += _num_bytes(batch["jpg"])
    end = time.perf_counter()
    decoded = loader.stats()["decoded_bytes_per_s"] * loader.stats()["elapsed_s"]
    total = samples + job["batch_size"]
    return {"ttfb_s": round(t_first - t0, 4), "samples": total,
            "samples_per_s": round(samples / max(end - t_first, 1e-9), 1),
            "epoch_samples_per_s": round(total / max(end - t0, 1e-9), 1),
            "distinct_labels_per_batch": round(float(np.mean(distinct)), 1),
            "decoded_ratio": round(decoded / max(payload, 1), 3)}


def read_reader(path: str, mode: str, job: dict[str, int]) -> dict[str, Any]:
    """Rank 0's consumers in this process, one after another (the loader's read path, no
    DataLoader, no collation): CPU time per sample."""
    from shardkit.plan import PlanParams, build_plan
    from shardkit.read import ReadOptions, open_dataset
    from shardkit.read.stats import ReadStats
    from shardkit.read.stream import iter_consumer

    dataset = open_dataset(path)
    settings = MODES[mode]
    params = PlanParams(batch_size=job["batch_size"], shuffle=bool(settings["shuffle"]),
                        spread=int(settings.get("spread", 1)), world_size=job["world_size"],
                        num_workers=job["workers"])
    plan = build_plan(dataset.manifest.shard_sizes, params)
    consumers = range(max(job["workers"], 1))
    stats, samples = ReadStats(), 0
    started = time.process_time()
    for consumer in consumers:
        for part in iter_consumer(dataset, plan, consumer, 0, None, stats, ReadOptions(views=True)):
            samples += len(part.indices)
    cpu = time.process_time() - started
    return {"samples": samples, "cpu_us_per_sample": round(cpu / max(samples, 1) * 1e6, 2),
            "blocks": stats.blocks, "decoded_ratio": round(stats.raw_bytes / max(samples * job["sample_bytes"], 1), 3),
            "shards_opened": sum(len(plan.shards_of(c, 0)) for c in consumers)}


def child(argv: list[str]) -> int:
    """One measurement, in this process: ``--child MEASURE PATH MODE JOB_JSON``."""
    measure, path, mode, job = argv[0], argv[1], argv[2], json.loads(argv[3])
    record = (read_loader if measure == "loader" else read_reader)(path, mode, job)
    print(json.dumps(record))
    return 0


def measure_in(tree: str, measure: str, path: str, mode: str, job: dict[str, int]) -> dict[str, Any]:
    """Run one measurement in a fresh process importing ``shardkit`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": tree}
    # -P: this folder is not put on the child's path (its modules would shadow others)
    command = [sys.executable, "-P", __file__, "--child", measure, path, mode, json.dumps(job)]
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{measure} {mode} with {tree} failed:\n{done.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    from benchmarks.measure import emit

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--per-class", type=int, default=100)
    parser.add_argument("--sample-bytes", type=int, default=16384)
    parser.add_argument("--shard-size", default="16MiB")
    parser.add_argument("--block-size", default="256KiB")
    parser.add_argument("--payload", choices=("random", "repeated"), default="random")
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measure", nargs="+", choices=("loader", "reader"), default=["loader", "reader"])
    parser.add_argument("--modes", nargs="+", choices=tuple(MODES), default=list(MODES))
    parser.add_argument("--against", help="another checkout: each read is repeated with its shardkit")
    parser.add_argument("--root", type=Path, default=Path("bench-data/read_mixing"))
    args = parser.parse_args(argv)
    path = str(Path(pack(args.root, args)).resolve())
    job = {"world_size": args.world_size, "workers": args.workers, "batch_size": args.batch_size,
           "sample_bytes": args.sample_bytes}
    trees = [TREE] + ([str(Path(args.against).resolve())] if args.against else [])
    for mode in args.modes:  # untimed: page cache hot for every mode
        measure_in(TREE, "reader", path, mode, job)
    records: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for measure in args.measure:
            for mode in args.modes:
                for tree in trees:
                    record = measure_in(tree, measure, path, mode, job)
                    records.append({"bench": "read_mixing", "measure": measure, "mode": mode, "tree": tree,
                                    "repeat": repeat, "dataset": Path(path).name, **job, **record})
                    emit(records[-1])
    for line in summary(records, trees):
        emit(line)
    return 0


def _speed(record: dict[str, Any]) -> float:
    """Higher is faster: epoch samples/s (loader), samples per CPU second (reader)."""
    if record["measure"] == "loader":
        return float(record["epoch_samples_per_s"])
    return 1e6 / max(float(record["cpu_us_per_sample"]), 1e-9)


def summary(records: list[dict[str, Any]], trees: list[str]) -> list[dict[str, Any]]:
    """Per measure and mode, medians over the repeats of: the spread modes' speed relative to
    ``spread-1`` in the same tree and repeat, and this tree's speed over ``--against``'s in the
    same back-to-back pair."""
    def speed(measure: str, mode: str, tree: str, repeat: int) -> float | None:
        for r in records:
            if (r["measure"], r["mode"], r["tree"], r["repeat"]) == (measure, mode, tree, repeat):
                return _speed(r)
        return None

    lines = []
    for measure, mode in sorted({(r["measure"], r["mode"]) for r in records}):
        line: dict[str, Any] = {"bench": "read_mixing", "summary": measure, "mode": mode}
        repeats = sorted({r["repeat"] for r in records})
        for tree in trees:
            ratios = [a / b for k in repeats
                      if (a := speed(measure, mode, tree, k)) and (b := speed(measure, "spread-1", tree, k))]
            if ratios:
                line[f"vs_spread1[{tree}]"] = round(float(np.median(ratios)), 3)
        if len(trees) == 2:
            pairs = [a / b for k in repeats
                     if (a := speed(measure, mode, trees[0], k)) and (b := speed(measure, mode, trees[1], k))]
            line["this_over_against"] = round(float(np.median(pairs)), 3)
        lines.append(line)
    return lines


if __name__ == "__main__":
    sys.exit(main())
