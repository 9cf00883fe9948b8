"""shardkit from a local S3 server (moto) — cold cache, warm cache, and no cache (range requests).

    python -m benchmarks.s3 [--samples 50000] [--workers 2] [--out benchmarks/results/s3.jsonl]

Requests are counted by the tests' counting proxy between s3fs and moto. moto is a Python server
on the same 2 cores, so these figures bound what shardkit does per request and per byte; they
are not S3's network numbers. Peers over S3 are not measured here yet.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import shardkit as sk  # noqa: E402
from benchmarks.jsonl import save_rows  # noqa: E402
from tests.helpers.fault_proxy import FaultProxy  # noqa: E402
from tests.helpers.s3 import create_bucket, start_moto_server, storage_options  # noqa: E402

BATCH = 64


def _read(url: str, options: dict[str, Any], workers: int, cache_dir: str | None) -> dict[str, Any]:
    dataset = sk.StreamingDataset(url, batch_size=BATCH, shuffle=False, cache_dir=cache_dir,
                                  storage_options=options)
    loader = sk.ShardLoader(dataset, num_workers=workers, prefetch_factor=4 if workers else None)
    started = time.perf_counter()
    first, count = None, 0
    for batch in loader:
        count += len(batch["id"])
        first = first if first is not None else time.perf_counter() - started
    elapsed = time.perf_counter() - started
    return {"samples": count, "samples_per_s": count / elapsed, "first_batch_s": first,
            "decoded_mb_per_s": loader.stats()["decoded_bytes_per_s"] / 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    with start_moto_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        url = f"s3://{create_bucket(endpoint)}/tokens"
        rng = np.random.default_rng(0)
        with sk.ShardWriter(url, shard_size="16MiB", storage_options=storage_options(endpoint)) as writer:
            for i in range(args.samples):
                writer.write({"id": i, "tokens": rng.integers(0, 50_000, int(rng.integers(128, 1025)), dtype=np.int32)})
        proxy = FaultProxy(endpoint).start()
        options = storage_options(proxy.endpoint_url)
        cache = os.path.join(tmp, "cache")
        for scenario, cache_dir in (("no-cache", None), ("cold-cache", cache), ("warm-cache", cache)):
            before = len(proxy.records("GET"))
            bytes_before = sum(r.bytes_sent for r in proxy.records("GET"))
            row = _read(url, options, args.workers, cache_dir)
            gets = proxy.records("GET")[before:]
            row.update(event="s3_read", scenario=scenario, workers=args.workers, gets=len(gets),
                       get_mb=(sum(r.bytes_sent for r in proxy.records("GET")) - bytes_before) / 1e6)
            rows.append(row)
        proxy.stop()
    save_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
