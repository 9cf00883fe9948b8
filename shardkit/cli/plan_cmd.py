"""``shardkit plan PATH``: who reads what in an epoch, steps per rank, samples dropped or padded;
``--quality FIELD``: distinct FIELD values per local batch against a uniform shuffle (P14)."""

from __future__ import annotations

import argparse
import sys

from shardkit.cli import mix_cmd
from shardkit.cli.common import UsageError, add_storage_options, dataset_path, int_at_least, print_json
from shardkit.cli.dataset_cmds import load
from shardkit.errors import PlanError
from shardkit.plan import Plan, PlanParams, build_plan
from shardkit.plan.params import DEFAULT_SPREAD, default_spread
from shardkit.plan.quality import LabelQuality, label_quality, quality_advice
from shardkit.read import StoredDataset
from shardkit.read.field_values import read_label_codes
from shardkit.read.mixture.config import is_mixture_file

_MAX_ROWS = 32


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="show an epoch's partition: steps per rank, per-consumer samples")
    p.add_argument("path", type=_dataset_or_mixture,
                   help="dataset folder/URL, its manifest.json, or a mixture .toml/.json")
    p.add_argument("--world-size", type=int_at_least(1), default=1)
    p.add_argument("--workers", type=int_at_least(0), default=0, help="DataLoader workers per rank")
    p.add_argument("--batch-size", type=int_at_least(1), required=True)
    p.add_argument("--epoch", type=int_at_least(0), default=0)
    p.add_argument("--seed", type=int_at_least(0), default=0)
    p.add_argument("--tail", default="drop", choices=("drop", "pad"))
    p.add_argument("--no-shuffle", action="store_true")
    p.add_argument("--shuffle-window", type=int_at_least(1), default=8192)
    p.add_argument("--interleave", type=int_at_least(1), default=1,
                   help="lanes each consumer reads at once (read-time mixing; default 1: off)")
    p.add_argument("--spread", type=int_at_least(1), default=None,
                   help=f"consumers each shard is split among when shuffling (read-time mixing; "
                   f"default, as the loader: {DEFAULT_SPREAD} unless the dataset was shuffled at pack "
                   f"time, then 1)")
    p.add_argument("--quality", metavar="FIELD", default=None,
                   help="measure distinct FIELD values per local batch against a uniform shuffle "
                   "(reads FIELD from every sample)")
    p.add_argument("--quality-batches", type=int_at_least(1), default=20,
                   help="batches per consumer measured (default 20)")
    p.add_argument("--json", action="store_true")
    add_storage_options(p)
    p.set_defaults(handler=run)


def _dataset_or_mixture(text: str) -> str:
    """A dataset (see :func:`dataset_path`) or a mixture description file."""
    return text if is_mixture_file(text) else dataset_path(text)


def run(args: argparse.Namespace) -> int:
    if is_mixture_file(args.path):  # a mixture description (specs/mixture.md)
        return mix_cmd.run(args)
    dataset = load(args)  # an unreadable manifest exits 2, as for info and verify
    try:
        params = PlanParams(
            seed=args.seed, epoch=args.epoch, world_size=args.world_size, num_workers=args.workers,
            batch_size=args.batch_size, tail=args.tail, shuffle=not args.no_shuffle,
            shuffle_window=args.shuffle_window, interleave=args.interleave,
            spread=args.spread or default_spread(dataset.manifest.order),
        )
    except PlanError as exc:  # e.g. more consumers than a plan may have (R14): bad input, exit 2
        raise UsageError(str(exc)) from None
    plan = build_plan(dataset.manifest.shard_sizes, params)
    summary = plan.summary()
    summary["fingerprint"] = dataset.manifest.fingerprint
    # An epoch with no batch is a problem found (exit 1); a large dropped share only a warning.
    code = 1 if summary["steps_per_rank"] == 0 and summary["num_source_samples"] > 0 else 0
    quality = measure_quality(dataset, plan, args.quality, args.quality_batches) if args.quality else None
    if quality is not None:
        summary["quality"] = quality.to_dict()
    if args.json:
        print_json(summary)
        return _warn(summary["warnings"], code)
    n = summary["num_source_samples"]
    print(f"dataset {dataset.url}: {n} samples in {summary['num_shards']} shards")
    print(
        f"epoch {args.epoch}: {args.world_size} ranks x {max(args.workers, 1)} consumers, batch {args.batch_size}, "
        f"tail={args.tail} -> {summary['steps_per_rank']} steps per rank (every rank)"
    )
    print(f"dropped {summary['num_dropped']} samples, padded {summary['num_padded']} repeats")
    print(f"{'consumer':>8} {'rank':>5} {'worker':>6} {'batches':>8} {'samples':>8} {'shards':>7}")
    for row in summary["consumers"][:_MAX_ROWS]:
        print(f"{row['consumer']:>8} {row['rank']:>5} {row['worker']:>6} {row['batches']:>8} "
              f"{row['samples']:>8} {row['num_shards']:>7}")
    if len(summary["consumers"]) > _MAX_ROWS:
        print(f"… {len(summary['consumers']) - _MAX_ROWS} more consumers (--json for all)")
    if quality is not None:
        print_quality(quality)
    return _warn(summary["warnings"], code)


def _warn(warnings: list[str], code: int) -> int:
    sys.stdout.flush()  # after the table, not inside it
    for warning in warnings:
        print(f"{'error' if code else 'warning'}: {warning}", file=sys.stderr)
    return code


def measure_quality(dataset: StoredDataset, plan: Plan, field: str, num_batches: int) -> LabelQuality:
    return label_quality(plan, read_label_codes(dataset, field), field, num_batches=num_batches)


def print_quality(quality: LabelQuality) -> None:
    print(
        f"quality of {quality.field!r}: {quality.distinct:.1f} distinct values per batch of "
        f"{quality.batch_size} (over {quality.num_batches} batches); a uniform shuffle gives "
        f"{quality.uniform:.1f} ({quality.ratio:.0%})"
    )
    advice = quality_advice(quality)
    if advice is not None:
        print(f"warning: {advice}", file=sys.stderr)
