"""Interleaved A/B of the shardkit download client between source trees, with curl as a
control, against one nginx: the form of comparison a shared, loaded machine allows.

    python -m benchmarks.download_ab --trees old=/work/main,new=. [--reps 6] [--shards 16]
        [--shard-size 64MiB] [--connections 16] [--data DIR] [--out FILE]

Each repeat runs curl, then every tree's ``benchmarks.download_client --client shardkit``
(from that tree, with that tree on ``PYTHONPATH``), the order of the trees reversed every
other repeat. ``--data`` keeps the packed dataset between invocations. Rows: one per run
(``cpu_s_per_gb``: the client's CPU seconds, all threads, per GB downloaded — what load skews
least), then a ``summary`` with each one's median and least CPU per GB and median MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from benchmarks.download_servers import serve
from benchmarks.downloads import BUCKET, NAME, pack, run_curl
from benchmarks.jsonl import save_rows
from shardkit.units import parse_size


def run_tree(tree: str, endpoint: str, cache: str, connections: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.download_client", "--client", "shardkit", "--url",
           f"s3://{BUCKET}/{NAME}", "--endpoint", endpoint, "--cache", cache, "--connections", str(connections)]
    done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=1800, check=False,
                          env=dict(os.environ, PYTHONPATH=tree))
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr[-1000:]}"}
    return dict(json.loads(lines[-1]))


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"event": "summary"}
    for label in dict.fromkeys(row["client"] for row in rows):
        runs = [row for row in rows if row["client"] == label and not row.get("error")]
        if runs:
            cpu = [float(row["cpu_s_per_gb"]) for row in runs]
            out[label] = {"runs": len(runs), "median_cpu_s_per_gb": statistics.median(cpu),
                          "least_cpu_s_per_gb": min(cpu),
                          "median_mb_per_s": statistics.median(float(row["mb_per_s"]) for row in runs)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", required=True, help="label=path,label=path")
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--shard-size", default="64MiB")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--data", default=None, help="where the packed dataset is kept (default: a temp dir)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    trees = [(label, os.path.abspath(path)) for label, path in (t.split("=", 1) for t in args.trees.split(","))]
    with tempfile.TemporaryDirectory(prefix="shardkit-download-ab-") as tmp:
        data = args.data or os.path.join(tmp, "data")
        folder = os.path.join(data, "serve", BUCKET, NAME)
        if not os.path.exists(os.path.join(folder, "manifest.json")):
            pack(folder, args.shards, parse_size(args.shard_size))
        with open(os.path.join(folder, "manifest.json")) as fh:
            shards = json.load(fh)["shards"]
        rows: list[dict[str, Any]] = []
        with serve(os.path.join(data, "serve"), "nginx", tmp) as (endpoint, server):
            for repeat in range(args.reps):
                order = trees if repeat % 2 == 0 else trees[::-1]
                for label, tree in [("curl", ""), *order]:
                    target = tempfile.mkdtemp(dir=tmp)
                    if label == "curl":
                        row = run_curl(endpoint, shards, target, args.connections)
                    else:
                        row = run_tree(tree, endpoint, target, args.connections)
                    shutil.rmtree(target, ignore_errors=True)
                    rows.append({"event": "download", "repeat": repeat, "server": server, **row, "client": label})
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        rows.append(summary([row for row in rows if row["event"] == "download"]))
    save_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
