"""``shardkit pack RAW OUT``."""

from __future__ import annotations

import argparse
import sys

from shardkit.cli.common import (
    Progress,
    add_storage_options,
    existing_path,
    int_at_least,
    key_value,
    key_values,
    print_json,
    size,
    storage_options,
    zstd_level,
)
from shardkit.units import format_bytes
from shardkit.write.imports import FORMATS as PEER_FORMATS
from shardkit.write.pack import PackOptions, pack
from shardkit.write.shuffle import ShuffleOptions
from shardkit.write.sources import FORMATS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pack",
        help="pack a raw folder or file into a dataset",
        description="Pack raw data (files grouped by key, JSONL, Parquet, WebDataset tars) into "
        "zstd-compressed, checksummed shards with a manifest.",
    )
    p.add_argument("src", type=existing_path, help="raw folder or file")
    p.add_argument("out", help="output folder or URL (s3://bucket/prefix)")
    p.add_argument("--format", default="auto", choices=("auto", *FORMATS, *PEER_FORMATS),
                   help="source format (default: detect from the file names, specs/pack-inputs.md); "
                   "mds, litdata, hf read those libraries' folders; text: one {\"text\": line} per line")
    p.add_argument("--split", default=None, help="with a Hugging Face dataset of several splits: the one to pack")
    p.add_argument("--workers", type=int_at_least(0), default=1,
                   help="parallel encoding processes (same output for any N)")
    p.add_argument("--shard-size", type=size, default="64MiB",
                   help="uncompressed bytes per shard (default 64MiB; blocks are at most this size)")
    p.add_argument("--block-size", type=size, default="1MiB", help="uncompressed bytes per block (default 1MiB)")
    p.add_argument("--level", type=zstd_level, default=3, help="zstd level (default 3)")
    p.add_argument("--compression", default="auto", choices=("auto", "zstd", "none"))
    p.add_argument("--layout", default="auto", choices=("auto", "rows"),
                   help="auto: blocks of uniform small samples are stored as columns (default); rows: never")
    p.add_argument("--metadata", action="append", type=key_value, metavar="KEY=VALUE", help="user metadata, repeatable")
    p.add_argument("--label-from-dir", action="store_true",
                   help="raw/<class>/<file>: add an int 'label' (an image folder <class>/<image> gets one anyway)")
    p.add_argument("--skip-bad", action="store_true", help="skip unreadable items and list them")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at OUT")
    p.add_argument("--engine", default="local", choices=("local", "ray"), help="local processes or Ray Data")
    p.add_argument("--address", default=None, help="Ray cluster address (with --engine ray)")
    p.add_argument("--map", metavar="MODULE:FUNCTION",
                   help="map each input record through FUNCTION (e.g. tokenize); MODULE is imported from "
                   "the current folder or an installed package (specs/token-blocks.md TB10)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true")
    _add_shuffle_options(p)
    add_storage_options(p)
    p.set_defaults(handler=run)


def _add_shuffle_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("order (specs/pack-shuffle.md)")
    g.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=None,
                   help="write samples in a seeded random order (default; the same order on both engines), "
                   "so readers get mixed batches even from a source sorted by class; --no-shuffle keeps "
                   "the source order")
    g.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0): same seed, same bytes")
    g.add_argument("--shuffle-memory", default="256MiB",
                   help="samples held in memory while shuffling; beyond it they go to temp files (default 256MiB)")
    g.add_argument("--tmp-dir", default=None, help="folder for the shuffle's temp files (default: system temp)")


def _shuffle_options(args: argparse.Namespace) -> ShuffleOptions | None:
    if args.shuffle is None:  # default: shuffle
        args.shuffle = True
    if not args.shuffle:
        return None
    return ShuffleOptions(seed=args.seed, memory=args.shuffle_memory, tmp_dir=args.tmp_dir)


def run(args: argparse.Namespace) -> int:
    try:
        shuffle = _shuffle_options(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    options = PackOptions(
        fmt=args.format,
        workers=args.workers,
        shard_size=args.shard_size,
        block_size=args.block_size,
        level=args.level,
        compression=args.compression,
        layout=args.layout,
        metadata=key_values(args.metadata),
        overwrite=args.overwrite,
        skip_bad=args.skip_bad,
        label_from_dir=args.label_from_dir,
        storage_options=storage_options(args),
        shuffle=shuffle,
        split=args.split,
    )
    if args.map:
        from shardkit.cli.map_cmd import map_options

        options = map_options(args, options)
    if args.engine == "ray":
        from shardkit.write.ray.engine import pack_with_ray

        summary = pack_with_ray(args.src, args.out, options, address=args.address, progress=not args.no_progress)
    else:
        progress = Progress("pack", enabled=not args.no_progress)
        try:
            summary = pack(args.src, args.out, options, progress)
        finally:
            progress.close()
    if args.json:
        print_json(summary.to_dict())
        return 0
    ratio = summary.raw_bytes / summary.num_bytes if summary.num_bytes else 0.0
    print(
        f"packed {summary.num_samples} samples into {summary.num_shards} shards at {summary.output}\n"
        f"  {format_bytes(summary.raw_bytes)} raw -> {format_bytes(summary.num_bytes)} on disk "
        f"({ratio:.2f}x), {summary.seconds:.1f} s, "
        f"{summary.num_samples / max(summary.seconds, 1e-9):.0f} samples/s\n"
        f"  fingerprint {summary.fingerprint}"
    )
    if summary.skipped:
        print(f"  skipped {len(summary.skipped)} bad item(s):")
        for entry in summary.skipped:
            print(f"    {entry['origin']}: {entry['error']}")
    return 0
