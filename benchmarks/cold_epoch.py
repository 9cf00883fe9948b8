"""A cold-cache training epoch against the link it downloads over (issue target: >= 0.8x curl).

    python -m benchmarks.cold_epoch [--samples 30000] [--workers 0 2] [--repeats 2]
        [--connections 8 16] [--server auto|nginx|python] [--out FILE]

Packs ``--samples`` image-like samples (``{"id", "jpg": 50-120 KB of random bytes, "label"}``,
shards of 64 MiB: the 30,000-sample default is ~2.6 GB in ~39 shards) into a folder served as a
path-style S3 endpoint on 127.0.0.1 (nginx when found, as in benchmarks/downloads.py), then,
interleaved ``--repeats`` times:

- ``curl``: every shard, whole, by ``curl --parallel`` at each ``--connections`` count: the link;
- ``cold``: one epoch of ``StreamingDataset("s3://…", cache_dir=<empty>)`` through
  ``ShardLoader`` at each ``--workers`` count, every byte of every batch counted;
- ``warm``: the same epoch again over the now full cache (the reader's own ceiling).

Each row gives GB/s of shard bytes (stored bytes over the epoch's wall time, first batch
included) and the client's CPU seconds per GB. The summary: each cold epoch's best over the best
curl (target >= 0.8, W=0 and W=2) and over its warm epoch. The server, the clients and the
reader share this machine's cores; on 2 cores that bounds every figure here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import shardkit as sk  # noqa: E402
from benchmarks.download_servers import serve  # noqa: E402
from benchmarks.jsonl import save_rows  # noqa: E402

BUCKET, NAME = "data", "images"
BATCH = 64


def pack(folder: str, samples: int) -> None:
    """``samples`` image-like samples (incompressible payloads of 50-120 KB) into ``folder``."""
    rng = np.random.default_rng(0)
    with sk.ShardWriter(folder, shard_size="64MiB") as writer:
        for index in range(samples):
            size = int(rng.integers(50_000, 120_001))
            writer.write({"id": index, "jpg": rng.bytes(size), "label": int(rng.integers(0, 1000))})


def run_curl(endpoint: str, shards: list[dict[str, Any]], out_dir: str, connections: int) -> dict[str, Any]:
    """Every shard, whole, ``connections`` transfers at once, by one curl process."""
    curl = shutil.which("curl") or "/usr/bin/curl"
    cmd = [curl, "--parallel", "--parallel-max", str(connections), "--parallel-immediate", "-sS", "-f"]
    for index, shard in enumerate(shards):
        cmd += ["-o", os.path.join(out_dir, f"{index}.shard"), f"{endpoint}/{BUCKET}/{NAME}/{shard['name']}"]
    before = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    seconds, cpu = time.perf_counter() - started, _children_cpu() - before
    total = sum(int(s["num_bytes"]) for s in shards)
    got = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    ok = done.returncode == 0 and got == total
    error = None if ok else f"exit {done.returncode}, {got} bytes: {done.stderr[-300:]}"
    return {"case": "curl", "connections": connections, "gb_per_s": total / seconds / 1e9,
            "cpu_s_per_gb": cpu / (total / 1e9), "seconds": seconds, "error": error}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_epoch(endpoint: str, cache: str, workers: int, case: str, stored: int) -> dict[str, Any]:
    """One epoch in a fresh process (``benchmarks.cold_epoch --epoch``): its row. ``stored``:
    the shards' bytes."""
    cmd = [sys.executable, "-m", "benchmarks.cold_epoch", "--epoch", endpoint, cache, str(workers), case, str(stored)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"case": case, "workers": workers, "error": f"exit {done.returncode}: {done.stderr[-1500:]}"}
    return dict(json.loads(lines[-1]))


def epoch(endpoint: str, cache: str, workers: int, case: str, stored: int) -> dict[str, Any]:
    """In the child: open the dataset (outside the timing), then time one whole epoch."""
    options = {"anon": True, "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    dataset = sk.StreamingDataset(f"s3://{BUCKET}/{NAME}", batch_size=BATCH, cache_dir=cache,
                                  storage_options=options)
    loader = sk.ShardLoader(dataset, num_workers=workers)
    started, cpu = time.perf_counter(), time.process_time()
    first = None
    samples = payload = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - started
        samples += len(batch["id"])
        payload += int(batch["jpg"].offsets[-1])
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu + _children_cpu()
    return {"case": case, "workers": workers, "gb_per_s": stored / seconds / 1e9, "samples_per_s": samples / seconds,
            "first_batch_s": first, "seconds": seconds, "samples": samples, "payload_bytes": payload,
            "cpu_s_per_gb": cpu / (stored / 1e9)}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def best(case: str, **match: Any) -> float | None:
        found = [r["gb_per_s"] for r in rows if r.get("case") == case and not r.get("error")
                 and all(r.get(k) == v for k, v in match.items())]
        return max(found) if found else None

    curl = best("curl")
    out: dict[str, Any] = {"event": "summary", "best_curl_gb_per_s": curl}
    for workers in sorted({r["workers"] for r in rows if r.get("case") == "cold"}):
        cold, warm = best("cold", workers=workers), best("warm", workers=workers)
        out[f"w{workers}"] = {"cold_gb_per_s": cold, "warm_gb_per_s": warm,
                              "cold_vs_curl": cold / curl if cold and curl else None,
                              "cold_vs_warm": cold / warm if cold and warm else None}
    out["target_met"] = all(v["cold_vs_curl"] is not None and v["cold_vs_curl"] >= 0.8
                            for k, v in out.items() if k.startswith("w"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=30_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--connections", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--server", choices=["auto", "nginx", "python"], default="auto")
    parser.add_argument("--out", default=None)
    parser.add_argument("--epoch", nargs=5, metavar=("ENDPOINT", "CACHE", "WORKERS", "CASE", "BYTES"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.epoch:  # the child process of one epoch
        endpoint, cache, workers, case, stored = args.epoch
        print(json.dumps(epoch(endpoint, cache, int(workers), case, int(stored))), flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="shardkit-cold-epoch-") as tmp:
        folder = os.path.join(tmp, "serve", BUCKET, NAME)
        started = time.perf_counter()
        pack(folder, args.samples)
        with open(os.path.join(folder, "manifest.json")) as fh:
            shards = json.load(fh)["shards"]
        stored = sum(int(s["num_bytes"]) for s in shards)
        rows: list[dict[str, Any]] = [{"event": "packed", "samples": args.samples, "shards": len(shards),
                                       "bytes": stored,
                                       "seconds": time.perf_counter() - started}]
        with serve(os.path.join(tmp, "serve"), args.server, tmp) as (endpoint, server):
            rows.append({"event": "server", "server": server, "endpoint": endpoint})
            for repeat in range(args.repeats):
                for connections in args.connections:
                    target = os.path.join(tmp, f"curl-{repeat}-{connections}")
                    os.makedirs(target)
                    rows.append({"event": "run", "repeat": repeat, **run_curl(endpoint, shards, target, connections)})
                    shutil.rmtree(target)
                for workers in args.workers:
                    cache = os.path.join(tmp, f"cache-{repeat}-{workers}")
                    for case in ("cold", "warm"):
                        row = run_epoch(endpoint, cache, workers, case, stored)
                        rows.append({"event": "run", "repeat": repeat, **row})
                    shutil.rmtree(cache, ignore_errors=True)
        rows.append(summary(rows))
    save_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
