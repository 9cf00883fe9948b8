"""``shardkit cache warm|ls|clear``: fill, inspect and clear a node-local cache dir.

``warm`` downloads the shards of a dataset into the cache (each once, verified), so a training
job starts hot: in dataset order, as many as the cache limit holds; it reports what the cache
holds at the end and exits 1 when that is not every shard. ``ls`` lists entries (``--json``
for machines). ``clear`` removes entries not in use, optionally only those unused for
``--older-than``. Never imports torch.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from shardkit.cli.common import (
    EXIT_USAGE,
    add_storage_options,
    dataset_path,
    duration,
    int_at_least,
    print_json,
    size,
    storage_options,
)
from shardkit.errors import ShardkitError
from shardkit.storage import CacheItem, ShardCache, Store, clear_cache, list_cache
from shardkit.units import parse_duration, parse_size

# The documented default, StreamingDataset's too (loader/env.py default_cache_dir, K47).
DEFAULT_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "shardkit")
# The variables a StreamingDataset reads too (shardkit/loader/env.py; not imported: no torch here).
CACHE_DIR_VAR, CACHE_LIMIT_VAR, DEFAULT_CACHE_LIMIT = "SHARDKIT_CACHE_DIR", "SHARDKIT_CACHE_LIMIT", "200GiB"
CACHE_OFF = "off"  # $SHARDKIT_CACHE_DIR=off: no cache (loader/env.py)

#: ``(url, storage_options, cache) -> (store, items)``: the shards a dataset URL names.
EntrySource = Callable[[str, dict[str, Any], ShardCache | None], tuple[Store, Sequence[CacheItem]]]


def entries_from_manifest(url: str, options: dict[str, Any],
                          cache: ShardCache | None = None) -> tuple[Store, list[CacheItem]]:
    """Every shard of the dataset at ``url``, keyed exactly as the loader keys them; the
    manifest goes through ``cache`` like the loader's (K18), so a job can start offline (K47).

    TODO(cli owner): this is the hook ``warm`` reads its entries from. It reuses
    ``shardkit.read`` (manifest + ``cache_item``) so warm and the loader share cache keys;
    replace it if those helpers move.
    """
    from shardkit.read.dataset import open_dataset
    from shardkit.read.stream import cache_item

    dataset = open_dataset(url, options, cache)
    return dataset.store, [cache_item(dataset, i) for i in range(len(dataset.manifest.shards))]


ENTRY_SOURCE: EntrySource = entries_from_manifest


@dataclass(frozen=True)
class WarmResult:
    """What a dataset needs (``num_entries``, ``num_bytes``) and what the cache holds of it."""

    num_entries: int
    num_bytes: int
    num_cached: int
    cached_bytes: int

    @property
    def complete(self) -> bool:
        return self.num_cached == self.num_entries


def warm(cache: ShardCache, store: Store, entries: Sequence[CacheItem], *, progress: bool = True,
         num_threads: int = 4) -> WarmResult:
    """Download ``entries`` into ``cache`` (each verified, none leased after): the longest
    prefix that fits in the cache limit — a job reads from the start, and warming more would
    only evict what it needs first. Then count what the cache really holds."""
    fitting, total = [], 0
    for item in entries:
        if total + item.num_bytes > cache.limit_bytes:
            break
        fitting.append(item)
        total += item.num_bytes
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="cache warm",
              disable=None if progress else True, file=sys.stderr) as bar:

        def one(item: CacheItem) -> None:
            try:
                cache.ensure(store, item)
            except Exception as exc:
                exc.add_note(f"while warming {store.url_of(item.name)} into {cache.cache_dir}")
                raise
            bar.update(item.num_bytes)

        with ThreadPoolExecutor(max_workers=max(1, num_threads),
                                thread_name_prefix="shardkit-warm") as pool:
            for future in [pool.submit(one, item) for item in fitting]:
                future.result()
    held = [item for item in entries if cache.holds(item)]
    return WarmResult(len(entries), sum(item.num_bytes for item in entries), len(held),
                      sum(item.num_bytes for item in held))


def add_cache_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``cache {warm,ls,clear}`` to the top-level ``subparsers``."""
    parser = subparsers.add_parser("cache", help="fill, list or clear a node-local shard cache")
    sub = parser.add_subparsers(dest="cache_command", required=True, metavar="ACTION")

    p_warm = sub.add_parser("warm", help="download every shard of a dataset into the cache")
    p_warm.add_argument("url", type=dataset_path, help="dataset folder or manifest URL (local path, s3://...)")
    _add_cache_dir(p_warm)
    p_warm.add_argument("--cache-limit", type=size, default=os.environ.get(CACHE_LIMIT_VAR, DEFAULT_CACHE_LIMIT),
                        help=f"cache size limit (default: ${CACHE_LIMIT_VAR} or {DEFAULT_CACHE_LIMIT})")
    p_warm.add_argument("--threads", type=int_at_least(1), default=4, help="parallel downloads (4)")
    p_warm.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_storage_options(p_warm)
    p_warm.set_defaults(handler=run_warm)

    p_ls = sub.add_parser("ls", help="list cache entries, least recently used first")
    _add_cache_dir(p_ls)
    p_ls.add_argument("--json", action="store_true", help="print JSON")
    p_ls.set_defaults(handler=run_ls)

    p_clear = sub.add_parser("clear", help="remove cache entries not in use")
    _add_cache_dir(p_clear)
    p_clear.add_argument("--older-than", type=duration, metavar="AGE", default=None,
                         help="only entries unused for AGE (e.g. 7d, 12h, 30m)")
    p_clear.add_argument("--json", action="store_true", help="print JSON")
    p_clear.set_defaults(handler=run_clear)
    return parser


add_parser = add_cache_parser  # the name shardkit.cli's optional-module loop calls


def run_warm(args: argparse.Namespace) -> int:
    from shardkit.read.dataset import split_manifest_path
    from shardkit.storage import split_protocol

    options = storage_options(args)
    if args.cache_dir == CACHE_OFF:
        print(f"error: ${CACHE_DIR_VAR}={CACHE_OFF} turns the cache off; name one with --cache-dir",
              file=sys.stderr)
        return EXIT_USAGE
    remote = split_protocol(split_manifest_path(args.url))[0] != "file"
    cache = ShardCache(args.cache_dir, parse_size(args.cache_limit)) if remote else None
    try:
        store, entries = ENTRY_SOURCE(args.url, options, cache)
    except ShardkitError as exc:  # no or unreadable manifest: bad input, exit 2 as `verify` says
        exc.exit_code = EXIT_USAGE  # type: ignore[attr-defined]
        raise
    if not store.worth_caching or cache is None:
        print(f"{args.url} is local: nothing to cache", file=sys.stderr)
        return 0
    done = warm(cache, store, entries, progress=not args.no_progress, num_threads=args.threads)
    if done.complete:
        print(f"warmed {done.num_entries} shards ({_human(done.num_bytes)}) in {cache.cache_dir}")
        return 0
    print(f"warmed {done.num_cached} of {done.num_entries} shards ({_human(done.cached_bytes)} of "
          f"{_human(done.num_bytes)}) in {cache.cache_dir}")
    print(f"error: the cache holds {done.num_cached} of {done.num_entries} shards: its limit "
          f"{_human(cache.limit_bytes)} is smaller than the dataset ({_human(done.num_bytes)}) or "
          f"other entries are in use; raise --cache-limit (${CACHE_LIMIT_VAR})", file=sys.stderr)
    return 1


def run_ls(args: argparse.Namespace) -> int:
    rows = list_cache(args.cache_dir)
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print(f"{args.cache_dir}: empty")
        return 0
    print(f"{'SIZE':>10}  {'LAST USE':<19}  {'IN USE':<6}  KEY")
    for row in rows:
        when = datetime.datetime.fromtimestamp(row["last_use"]).strftime("%Y-%m-%d %H:%M:%S")
        print(f"{_human(row['size']):>10}  {when:<19}  {'yes' if row['in_use'] else 'no':<6}  "
              f"{row['key']}")
    total = sum(row["size"] for row in rows)
    print(f"{len(rows)} entries, {_human(total)} in {args.cache_dir}")
    return 0


def run_clear(args: argparse.Namespace) -> int:
    older = None if args.older_than is None else parse_duration(args.older_than)
    started = time.monotonic()
    count, freed = clear_cache(args.cache_dir, older_than_seconds=older)
    if args.json:
        print_json({"removed": count, "bytes": freed, "seconds": time.monotonic() - started})
    else:
        print(f"removed {count} entries ({_human(freed)}) from {args.cache_dir}")
    return 0


def _add_cache_dir(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get(CACHE_DIR_VAR) or DEFAULT_CACHE_DIR
    parser.add_argument("--cache-dir", default=default,
                        help=f"cache folder (default: $SHARDKIT_CACHE_DIR or {DEFAULT_CACHE_DIR})")


def _human(num_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if num_bytes < 1024 or unit == "TiB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.1f} TiB"
