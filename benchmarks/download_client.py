"""One client's cold-cache download of a dataset's shards, in a fresh process: the worker of
benchmarks/downloads.py (run by it; one JSON line on stdout).

    python -m benchmarks.download_client --client shardkit --url s3://data/ds \\
        --endpoint http://127.0.0.1:PORT --cache DIR --connections 16 [--mode download|fork] \\
        [--ca-file CERT.pem]

Clients (all through ``ShardCache``, so download, verify-free publish and the file layout are
the same; only the requests differ):

- ``shardkit``: today's defaults (8 MiB parts, 8 per shard, node budget, pacing, hedging),
  each part's body streamed over a plain HTTP connection, signed by s3fs (K23);
- ``shardkit-s3fs``: the same with every body read through s3fs (``Store.direct_ranges``
  off): what the parts cost without K23;
- ``obstore``: the same with obstore in place of s3fs (benchmarks/obstore_store.py);
- ``s3fs-one-get``: one GET per shard through s3fs — the behaviour this benchmark's issue
  measured as "today's s3fs path" (no parts, no budget, no hedging);
- ``s3fs-main``: what main at 231e3a6 did (16 MiB chunks, 4 per shard through s3fs, nothing else).

``--mode fork``: the client is used in the parent first, then by 2 forked DataLoader workers
(each downloads shards through the same cache), then by the parent again.

``--ca-file`` (an ``https://`` endpoint with a self-signed certificate): the CA bundle the
s3fs-based clients verify the server with, as the storage option ``client_kwargs={"verify":
path}`` — botocore's ``verify``, which ``DirectS3Store`` hands to its own TLS connections too
(http_ranges.py), so shardkit's bodies are verified against it as well. obstore takes none
here (benchmarks/obstore_store.py has no such option): it refuses.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from shardkit.storage import CacheItem, CacheOptions, ShardCache, Store, open_store  # noqa: E402

ONE_GET = 1 << 40


def make_store(client: str, url: str, endpoint: str, ca_file: str | None = None) -> Store:
    if client == "obstore":
        if ca_file is not None:
            raise SystemExit("obstore: no CA file option in benchmarks/obstore_store.py (HTTPS mode skips it)")
        from benchmarks.obstore_store import ObstoreStore

        return ObstoreStore(url, endpoint)
    client_kwargs: dict[str, object] = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    if ca_file is not None:
        client_kwargs["verify"] = ca_file  # botocore's verify; DirectS3Store's bodies use it too
    options = {"anon": True, "client_kwargs": client_kwargs}
    # the others measure bodies read by s3fs
    return open_store(url, options, direct_ranges=client == "shardkit")


def cache_options(client: str, connections: int) -> tuple[CacheOptions, int]:
    """The cache's options and how many shards one process downloads at once."""
    if client == "s3fs-one-get":
        return CacheOptions(chunk_bytes=ONE_GET, download_threads=1, hedge_after=None, node_connections=1024), 2
    if client == "s3fs-main":
        return CacheOptions(chunk_bytes=16 << 20, download_threads=4, hedge_after=None, node_connections=1024), 2
    options = CacheOptions(node_connections=connections)
    return options, max(2, -(-connections // options.download_threads))


def shard_items(store: Store) -> list[CacheItem]:
    manifest = json.loads(store.read("manifest.json"))
    return [CacheItem(s["name"], f"bench/{s['name']}", int(s["num_bytes"])) for s in manifest["shards"]]


def download(args: argparse.Namespace) -> dict[str, Any]:
    store = make_store(args.client, args.url, args.endpoint, args.ca_file)
    items = shard_items(store)  # also opens the client and a connection, outside the timing
    options, at_once = cache_options(args.client, args.connections)
    cache = ShardCache(args.cache, 2 * sum(i.num_bytes for i in items) + (1 << 20), options)
    started, cpu = time.perf_counter(), time.process_time()
    error = None
    try:
        with ThreadPoolExecutor(max_workers=at_once) as pool:
            list(pool.map(lambda item: cache.ensure(store, item), items))
    except Exception as exc:  # reported, not raised: the orchestrator compares outcomes
        error = f"{type(exc).__name__}: {exc}"
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    total = sum(i.num_bytes for i in items)
    stats, pacing = cache.stats, cache.downloader().pacing
    return {
        "bytes": total,
        "seconds": seconds,
        "mb_per_s": total / seconds / 1e6,
        "cpu_s_per_gb": cpu / (total / 1e9),  # this process, all threads: what a loaded machine cannot skew
        "error": error,
        "shards_at_once": at_once,
        "parts": stats.parts,
        "throttled": stats.throttled,
        "hedged": stats.hedged,
        "hedge_wins": stats.hedge_wins,
        "lowest_limit": pacing.lowest,
        # shardkit: whether the bodies went over its own connections (K23), not through s3fs
        **({"direct_bodies": getattr(store, "_direct", None)} if args.client == "shardkit" else {}),
    }


class _Shards:
    """A map-style dataset: item i = download shard i into the cache, return its size."""

    def __init__(self, store: Store, cache: ShardCache, items: list[CacheItem]) -> None:
        self.store, self.cache, self.items = store, cache, items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> int:
        self.cache.ensure(self.store, self.items[index])
        return self.items[index].num_bytes


def fork(args: argparse.Namespace) -> dict[str, Any]:
    import torch.utils.data

    store = make_store(args.client, args.url, args.endpoint, args.ca_file)
    items = shard_items(store)  # the parent's client is live before the fork
    options, _ = cache_options(args.client, args.connections)
    cache = ShardCache(args.cache, 2 * sum(i.num_bytes for i in items) + (1 << 20), options)
    shards: Any = _Shards(store, cache, items)  # map-style: __len__ and __getitem__
    loader: Any = torch.utils.data.DataLoader(
        shards, batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=120
    )
    started = time.perf_counter()
    row: dict[str, Any] = {"error": None}
    try:
        row["bytes"] = sum(int(n) for n in loader)
        row["workers_s"] = time.perf_counter() - started
        again = time.perf_counter()
        store.read("manifest.json")  # the parent's pooled connections must still work (K17)
        row["parent_after_s"] = time.perf_counter() - again
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--client", choices=["shardkit", "shardkit-s3fs", "obstore", "s3fs-one-get", "s3fs-main"], required=True
    )
    parser.add_argument("--url", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--mode", choices=["download", "fork"], default="download")
    parser.add_argument("--ca-file", default=None, help="CA bundle to verify an https endpoint with")
    args = parser.parse_args()
    row = download(args) if args.mode == "download" else fork(args)
    print(json.dumps({"client": args.client, "mode": args.mode, **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
