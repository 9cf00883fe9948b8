"""``shardkit verify | info | head``: commands that read one dataset."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from shardkit.cli.common import (
    Progress,
    add_storage_options,
    dataset_path,
    int_at_least,
    print_json,
    storage_options,
)
from shardkit.errors import ShardkitError, StorageError
from shardkit.read import StoredDataset, open_dataset
from shardkit.read.verify import verify_dataset
from shardkit.units import format_bytes, parse_size

EXIT_USAGE = 2


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check every byte and sample of a dataset")
    p.add_argument("path", type=dataset_path, help="dataset folder/URL or its manifest.json")
    p.add_argument("--quick", action="store_true", help="sizes and whole-file checksums only")
    p.add_argument("--workers", type=int_at_least(1), default=4, help="shards checked in parallel")
    p.add_argument("--strict", action="store_true", help="files the manifest does not name are an error")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--max-block-size", type=parse_size, default=None, metavar="SIZE",
                   help="refuse blocks declaring more raw bytes (default: $SHARDKIT_MAX_BLOCK_BYTES or 256MiB)")
    add_storage_options(p)
    p.set_defaults(handler=run_verify)

    p = sub.add_parser("info", help="counts, sizes, schema and metadata of a dataset")
    p.add_argument("path", type=dataset_path, help="dataset folder/URL or its manifest.json")
    p.add_argument("--json", action="store_true")
    add_storage_options(p)
    p.set_defaults(handler=run_info)

    p = sub.add_parser("head", help="print the first samples of a dataset")
    p.add_argument("path", type=dataset_path, help="dataset folder/URL or its manifest.json")
    p.add_argument("-n", type=int_at_least(0), default=5, help="number of samples (default 5)")
    p.add_argument("--json", action="store_true")
    add_storage_options(p)
    p.set_defaults(handler=run_head)


def load(args: argparse.Namespace) -> StoredDataset:
    """The dataset, or an error carrying exit code 2 (unreadable manifest)."""
    try:
        return open_dataset(args.path, storage_options(args))
    except (ShardkitError, StorageError) as exc:
        exc.exit_code = EXIT_USAGE  # type: ignore[attr-defined]
        raise


def run_verify(args: argparse.Namespace) -> int:
    dataset = load(args)
    progress = Progress("verify", total=len(dataset.manifest.shards), unit="shards", enabled=not args.no_progress)
    try:
        report = verify_dataset(dataset, quick=args.quick, workers=args.workers,
                                on_shard=lambda _: progress.update(1), max_block_bytes=args.max_block_size)
    finally:
        progress.close()
    if args.json:
        print_json(report.to_dict())
    else:
        bad = [s for s in report.shards if not s.ok]
        what = "sizes and checksums" if args.quick else "every block and sample"
        if not bad:
            print(f"OK: {len(report.shards)} shards, {report.num_samples} samples ({what}) {report.fingerprint}")
        for shard in bad:
            sample = f", first bad sample {shard.first_bad_sample}" if shard.first_bad_sample is not None else ""
            print(f"BAD shard {shard.name}{sample}:", file=sys.stderr)
            for error in shard.errors[:20]:
                print(f"  {error}", file=sys.stderr)
        for index in [s for s in report.length_indexes if not s.ok]:
            print(f"BAD length index {index.name}:", *(f"  {e}" for e in index.errors[:20]), sep="\n", file=sys.stderr)
        if bad:
            print(f"FAILED: {len(bad)} of {len(report.shards)} shards are bad", file=sys.stderr)
    report_unnamed(report.unnamed_files, dataset.url, args.strict)
    return 0 if report.ok and not (args.strict and report.unnamed_files) else 1


def report_unnamed(names: list[str], url: str, strict: bool) -> None:
    """Files under the dataset that the manifest does not name: a warning, or with --strict an error."""
    if not names:
        return
    shown = ", ".join(names[:10]) + (f" … ({len(names)} in all)" if len(names) > 10 else "")
    label = "error" if strict else "warning"
    print(f"{label}: {len(names)} file(s) under {url} are not named by its manifest: {shown}", file=sys.stderr)


def info_dict(dataset: StoredDataset) -> dict[str, Any]:
    m = dataset.manifest
    return {
        "url": dataset.url,
        "fingerprint": m.fingerprint,
        "created_by": m.created_by,
        "num_samples": m.num_samples,
        "num_shards": len(m.shards),
        "num_blocks": sum(s.num_blocks for s in m.shards),
        "num_bytes": m.num_bytes,
        "raw_bytes": m.raw_bytes,
        "compression_ratio": round(m.raw_bytes / m.num_bytes, 3) if m.num_bytes else None,
        "schema": m.schema,
        "metadata": m.metadata,
        "order": m.order,
    }


def describe_order(order: dict[str, Any] | None) -> str:
    """The manifest's ``order`` (M9) in words."""
    if order is None:
        return "not recorded (packed by an older shardkit)"
    if not order.get("shuffled"):
        return "source order (as written: pack --no-shuffle, or a ShardWriter)"
    return f"shuffled at pack time ({order.get('method')}, seed {order.get('seed')})"


def run_info(args: argparse.Namespace) -> int:
    info = info_dict(load(args))
    if args.json:
        print_json(info)
        return 0
    print(f"dataset      {info['url']}")
    print(f"fingerprint  {info['fingerprint']}  ({info['created_by']})")
    print(f"samples      {info['num_samples']} in {info['num_shards']} shards, {info['num_blocks']} blocks")
    print(
        f"size         {format_bytes(info['num_bytes'])} on disk, {format_bytes(info['raw_bytes'])} raw "
        f"(ratio {info['compression_ratio']})"
    )
    print(f"order        {describe_order(info['order'])}")
    print("schema")
    for name, desc in info["schema"].items():
        print(f"  {name:<20} {describe_field(desc)}")
    if info["metadata"]:
        print("metadata")
        for key, value in info["metadata"].items():
            text = repr(value)
            print(f"  {key:<20} {text[:200] + '…' if len(text) > 200 else text}")
    return 0


def describe_field(desc: dict[str, Any]) -> str:
    kind = desc["type"]
    text = "|".join(desc["types"]) if kind == "any" else kind
    if "dtype" in desc:
        dims = desc["shape"]
        shape = "?" if dims is None else "[" + ", ".join("*" if d is None else str(d) for d in dims) + "]"
        text += f" {desc['dtype'] or '|'.join(desc.get('dtypes', []))} {shape}"
    flags = [f for f in ("optional", "nullable") if desc.get(f)]
    return text + (f" ({', '.join(flags)})" if flags else "")


_SHOW_DEPTH = 8  # nested lists and maps below this depth are shown as "…"


def show_value(value: Any, width: int = 80, depth: int = 0) -> Any:
    """A readable, bounded rendering: arrays as dtype/shape + first values, long bytes cut,
    deep nesting cut (so no sample can exhaust the stack while printed)."""
    if isinstance(value, (dict, list)) and depth >= _SHOW_DEPTH:
        return f"… ({type(value).__name__} nested deeper)"
    if isinstance(value, np.ndarray) or type(value).__name__ == "Tensor":
        try:
            array, dtype = np.asarray(value), None
        except TypeError:  # bfloat16, float8: torch-only dtypes, shown as float32 values
            array, dtype = np.asarray(value.float()), str(value.dtype).removeprefix("torch.")
        head = ", ".join(str(x) for x in array.reshape(-1)[:8])
        more = ", …" if array.size > 8 else ""
        return f"{type(value).__name__} {dtype or array.dtype} {list(array.shape)} [{head}{more}]"
    if isinstance(value, bytes):
        return f"bytes[{len(value)}] {value[:16].hex()}{'…' if len(value) > 16 else ''}"
    if isinstance(value, str) and len(value) > width:
        return value[:width] + f"… ({len(value)} chars)"
    if isinstance(value, dict):
        return {k: show_value(v, width, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        shown = [show_value(v, width, depth + 1) for v in value[:8]]
        return shown + ([f"… {len(value)} items"] if len(value) > 8 else [])
    return value


def run_head(args: argparse.Namespace) -> int:
    dataset = load(args)
    shown = []
    for index, sample in enumerate(dataset.samples()):
        if index >= args.n:
            break
        shown.append({key: show_value(value) for key, value in sample.items()})
    if args.json:
        print_json(shown)
        return 0
    for index, sample in enumerate(shown):
        print(f"--- sample {index}")
        for key, value in sample.items():
            print(f"  {key}: {value}")
    return 0
