"""Startup at scale (target T4, benchmarks/README.md): open a dataset of 1e5 shards / 1e9 samples and plan it.

    python -m benchmarks.scale_startup [--shards 100000] [--samples 1000000000] [--ranks 512] \
        [--workers 8] [--out benchmarks/results/scale_startup.jsonl]

Synthesizes the manifest only (no shard is written: opening reads none) twice — with its
binary companion ``manifest.bin`` (what the writer publishes for a large manifest, M15) and
without it (the JSON path, as for datasets from older writers) — then opens each in a fresh
process through the public path (``open_dataset``: read, validate; ``build_plan`` for
``ranks × workers`` consumers) and reports per process: wall seconds of open and plan, peak RSS
(``VmHWM``) and its growth over the process after imports. Prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.jsonl import save_rows

MIB = 1 << 20


def write_manifest(folder: str, num_shards: int, num_samples: int, companion: bool) -> int:
    """A valid manifest of ``num_shards`` equal shards (and its companion); returns its bytes."""
    from shardkit.format import Manifest, ShardInfo
    from shardkit.format.manifest_companion import encode_companion

    per, extra = divmod(num_samples, num_shards)
    shards = tuple(ShardInfo(f"shards/shard-{i:06d}.sks", per + (i < extra), 64 << 20, 16, 70 << 20, 4096,
                             f"xxh64:{(i * 0x9E3779B97F4A7C15) % (1 << 64):016x}") for i in range(num_shards))
    schema = {"id": {"type": "int"}, "tokens": {"type": "ndarray", "dtype": "<i4", "shape": [None]}}
    data = Manifest(shards, schema, {"synthetic": True}, "benchmarks.scale_startup").to_json()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "manifest.json"), "wb") as fh:
        fh.write(data)
    if companion:
        with open(os.path.join(folder, "manifest.bin"), "wb") as fh:
            fh.write(encode_companion(data))
    return len(data)


def child(folder: str, ranks: int, workers: int) -> dict[str, Any]:
    """Runs in a fresh process: imports, then open + plan, timed and measured."""
    started = time.perf_counter()
    from shardkit.plan import PlanParams, build_plan
    from shardkit.read import open_dataset

    imported = time.perf_counter()
    base = _peak_rss()
    dataset = open_dataset(folder)
    opened = time.perf_counter()
    plan = build_plan(dataset.manifest.shard_sizes,
                      PlanParams(seed=0, batch_size=32, world_size=ranks, num_workers=workers))
    planned = time.perf_counter()
    peak = _peak_rss()
    return {"import_s": imported - started, "open_s": opened - imported, "plan_s": planned - opened,
            "open_and_plan_s": planned - imported, "peak_rss_mib": peak / MIB,
            "rss_growth_mib": (peak - base) / MIB, "num_shards": len(dataset.manifest.shards),
            "num_samples": dataset.manifest.num_samples, "consumers": plan.num_consumers}


def _peak_rss() -> int:
    """This process's peak resident set (VmHWM; ``ru_maxrss`` would carry the parent's over exec)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run(shards: int, samples: int, ranks: int, workers: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for companion in (True, False):
            folder = os.path.join(tmp, "with-companion" if companion else "json-only")
            size = write_manifest(folder, shards, samples, companion)
            cmd = [sys.executable, "-m", "benchmarks.scale_startup", "--child", folder,
                   "--ranks", str(ranks), "--workers", str(workers)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            rows.append({"event": "scale_startup", "path": "companion" if companion else "json",
                         "manifest_mib": size / MIB, **row})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=1_000_000_000)
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ranks, args.workers)), flush=True)
        return
    save_rows(run(args.shards, args.samples, args.ranks, args.workers), args.out)


if __name__ == "__main__":
    main()
