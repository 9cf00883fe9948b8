"""shardkit from a local S3 server — cold cache, warm cache, and no cache (range requests).

    python -m benchmarks.s3 [--samples 50000] [--workers 2] [--out benchmarks/results/s3.jsonl]
    python -m benchmarks.s3 --server keepalive [--samples 20000] [--shard-size 1MiB] [--out …]
    python -m benchmarks.s3 --latency 0.02 [--block-size 256KiB] …   (moto: a round trip per GET)

The last row (``s3_no_cache_vs_cold``) is target T7's ratio: no-cache samples/s over cold-cache
samples/s (blocks read ahead by concurrent range requests, specs/cache.md K33; target ≥ 0.8).
``--latency`` makes the proxy wait that long before each answer, as a far object store would.

moto (default): requests are counted by the tests' counting proxy between s3fs and moto.
keepalive: the dataset is packed locally and served by tests/helpers/keepalive_s3.py, which
keeps connections open as real object stores do; it times the first open (import, client,
manifest) and the issue-23 sequence: a cold-cache epoch with workers, then a second dataset
opened in the same process (warm cache). Both servers are Python on the same cores as the
reader, so these figures bound what shardkit does per request and per byte; they are not S3's
network numbers. Peers over S3 are not measured here yet.
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
from tests.helpers.fault_proxy import Fault, FaultProxy  # noqa: E402
from tests.helpers.s3 import create_bucket, start_moto_server, storage_options  # noqa: E402

BATCH = 64


def _read(url: str, options: dict[str, Any], workers: int, cache_dir: str | None) -> dict[str, Any]:
    """One epoch; times from the dataset's construction (``open_s``) to each batch."""
    opened = time.perf_counter()
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
            "open_s": started - opened, "total_s": time.perf_counter() - opened,
            "decoded_mb_per_s": loader.stats()["decoded_bytes_per_s"] / 1e6}


def _write(url: str, samples: int, options: dict[str, Any] | None, shard_size: str,
           block_size: str = "1MiB") -> None:
    rng = np.random.default_rng(0)
    with sk.ShardWriter(url, shard_size=shard_size, block_size=block_size, storage_options=options) as writer:
        for i in range(samples):
            writer.write({"id": i, "tokens": rng.integers(0, 50_000, int(rng.integers(128, 1025)), dtype=np.int32)})


def _keepalive(args: argparse.Namespace) -> list[dict[str, Any]]:
    """First open, then the issue-23 sequence, against the keep-alive server."""
    from shardkit.read import open_dataset
    from shardkit.storage import open_store
    from tests.helpers.keepalive_s3 import serve_dataset

    rows = []
    _ = sk.StreamingDataset  # imports torch now, so that open_s times storage only
    with tempfile.TemporaryDirectory() as tmp:
        _write(os.path.join(tmp, "tokens"), args.samples, None, args.shard_size, args.block_size)
        with serve_dataset(os.path.join(tmp, "tokens")) as (url, server):
            options = server.storage_options()
            started = time.perf_counter()
            import s3fs  # noqa: F401 - timed: the first open of a process pays for it
            imported = time.perf_counter()
            open_store(url, options).read("manifest.json")  # client creation + one GET
            client = time.perf_counter()
            open_store(url, options).read("manifest.json")
            shards = len(open_dataset(url, options).manifest.shards)
            rows.append({"event": "s3_first_open", "shards": shards, "import_s3fs_s": imported - started,
                         "client_and_get_s": client - imported, "cached_get_s": time.perf_counter() - client})
            cache = os.path.join(tmp, "cache")
            for scenario, cache_dir in (("cold-cache", cache), ("second-open-warm-cache", cache),
                                        ("no-cache", None)):
                before = len(server.records())
                row = _read(url, options, args.workers, cache_dir)
                row.update(event="s3_keepalive_read", scenario=scenario, workers=args.workers,
                           requests=len(server.records()) - before, connections=server.num_connections)
                rows.append(row)
    return rows + [_ratio(rows)]


def _ratio(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """T7: no-cache throughput as a fraction of cold-cache throughput, in the same run."""
    rate = {row["scenario"]: row["samples_per_s"] for row in rows if "scenario" in row}
    return {"event": "s3_no_cache_vs_cold", "no_cache_samples_per_s": rate["no-cache"],
            "cold_cache_samples_per_s": rate["cold-cache"], "ratio": rate["no-cache"] / rate["cold-cache"],
            "target": 0.8}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--server", choices=["moto", "keepalive"], default="moto")
    parser.add_argument("--shard-size", default=None, help="default: 16MiB (moto), 1MiB (keepalive)")
    parser.add_argument("--block-size", default="1MiB")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="moto: seconds the proxy waits before answering each shard GET")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.server == "keepalive":
        args.shard_size = args.shard_size or "1MiB"
        save_rows(_keepalive(args), args.out)
        return 0
    rows = []
    with start_moto_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        url = f"s3://{create_bucket(endpoint)}/tokens"
        _write(url, args.samples, storage_options(endpoint), args.shard_size or "16MiB", args.block_size)
        proxy = FaultProxy(endpoint).start()
        if args.latency:
            proxy.add(Fault(kind="latency", rate=1.0, key="/shards/", delay=args.latency))
        options = storage_options(proxy.endpoint_url)
        cache = os.path.join(tmp, "cache")
        for scenario, cache_dir in (("no-cache", None), ("cold-cache", cache), ("warm-cache", cache)):
            before = len(proxy.records("GET"))
            proxy.reset_max_in_flight()
            bytes_before = sum(r.bytes_sent for r in proxy.records("GET"))
            row = _read(url, options, args.workers, cache_dir)
            gets = proxy.records("GET")[before:]
            row.update(event="s3_read", scenario=scenario, workers=args.workers, gets=len(gets),
                       get_mb=(sum(r.bytes_sent for r in proxy.records("GET")) - bytes_before) / 1e6,
                       latency_s=args.latency, max_requests_at_once=proxy.max_in_flight)
            rows.append(row)
        proxy.stop()
    save_rows(rows + [_ratio(rows)], args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
