"""``shardkit audit AUDIT_DIR``: prove what a (killed, resumed) run trained, from the audit folder
``ShardLoader(..., audit_dir=)`` writes (specs/resume-state.md R15). Exit 0 when every sample
(or token) of every epoch was trained exactly as planned, 1 naming the lost and duplicated
ones, 2 for a bad command line or an unreadable folder or dataset."""

from __future__ import annotations

import argparse
from typing import Any

from shardkit.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_storage_options,
    int_at_least,
    print_json,
    storage_options,
)
from shardkit.read import audit as samples
from shardkit.read import audit_tokens as tokens
from shardkit.read.mixture.config import is_mixture_file


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="prove every sample (or token) of a run was trained exactly once")
    p.add_argument("audit_dir", help="the run's audit folder (ShardLoader(..., audit_dir=))")
    p.add_argument("--data", default=None, help="the run's dataset or mixture .toml/.json")
    p.add_argument("--num-samples", type=int_at_least(0), default=None,
                   help="the dataset's samples (instead of --data, unweighted runs)")
    p.add_argument("--sample-weights", default=None, help="the run's numeric weight field, or a .npy of weights")
    p.add_argument("--samples-per-epoch", type=int_at_least(1), default=None,
                   help="a weighted run's samples per epoch (default: the dataset's size)")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="the run's seed")
    p.add_argument("--epochs", type=int_at_least(1), default=1, help="epochs the run trained (default 1)")
    p.add_argument("--no-shuffle", action="store_true", help="a mixture run without shuffle")
    p.add_argument("--tokens", action="store_true", help="a token-block run: check every token position")
    p.add_argument("--named", type=int_at_least(0), default=samples.NAMED,
                   help=f"lost/duplicated elements listed per epoch (default {samples.NAMED})")
    p.add_argument("--json", action="store_true")
    add_storage_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    options = storage_options(args) or None
    if args.tokens:
        if args.data is None:
            raise UsageError("audit --tokens needs --data (the run's dataset or mixture file)")
        report = tokens.audit(args.audit_dir, args.data, args.epochs, options, args.named)
    else:
        total, epochs, of, names = _expectation(args, options)
        report = samples.audit(args.audit_dir, total, epochs, of, names, args.named)
    if args.json:
        print_json(report)
    else:
        _print(report, args.tokens)
    return EXIT_OK if report["ok"] else EXIT_FAILED


def _expectation(args: argparse.Namespace, options: dict[str, Any] | None) -> tuple[Any, ...]:
    """``(num_samples, epochs, multiplicities, names)`` for read/audit.py from the command line."""
    if args.data is not None and is_mixture_file(args.data):
        if args.sample_weights:
            raise UsageError("--sample-weights is for a dataset; a mixture's weights are in its file")
        total, of, names = samples.mixture_expectation(args.data, args.seed, not args.no_shuffle, options)
        return total, args.epochs, of, names
    if args.sample_weights:
        if args.data is None:
            raise UsageError("--sample-weights needs --data (the dataset it weights)")
        of = samples.weighted_multiplicities(args.data, args.sample_weights, args.samples_per_epoch, args.seed,
                                             options)
        return 0, args.epochs, of, None
    if args.data is not None:
        from shardkit.read import open_dataset  # noqa: PLC0415

        return open_dataset(args.data, options).manifest.num_samples, args.epochs, None, None
    if args.num_samples is None:
        raise UsageError("give --data DATA (a dataset or mixture file) or --num-samples N")
    return args.num_samples, args.epochs, None, None


def _print(report: dict[str, Any], token_run: bool) -> None:
    unit = "token positions" if token_run else "samples"
    for e in report["epochs"]:
        trained = e.get("pairs", e["samples"] if "samples" in e else 0)
        expected = e.get("expected")
        of = f" of {expected}" if expected is not None else f" ({e['distinct']} distinct)"
        drops = f", planned drops {e['planned_drops']}" if e.get("planned_drops") else ""
        if "samples_off" in e:  # counted against a multiplicity per sample (weighted, mixture)
            print(f"epoch {e['epoch']}: {trained} samples trained of {expected}, {e['samples_off']} samples off "
                  f"their count, extra copies {e['duplicates']}, missing copies {e['missing']}{drops}")
        else:
            print(f"epoch {e['epoch']}: {trained} {unit} trained{of}, duplicates {e['duplicates']}, "
                  f"missing {e['missing']}{drops}")
        if e.get("drops_beyond_epoch"):
            print(f"  {e['drops_beyond_epoch']} samples dropped more often than the epoch holds them")
        for kind in ("lost", "duplicated"):
            group = e[kind]
            if group["total"]:
                shown = ", ".join(_name(x) for x in group["first"])
                left = group["total"] - len(group["first"])
                more = f" (and {left} more)" if left > 0 else ""
                print(f"  {kind} ({group['total']}): {shown}{more}")
        for name, s in e.get("sources", {}).items():
            logged = "" if s["logged"] is None else f" ({s['logged']} logged by _source)"
            print(f"  {name}: {s['pairs']} of {s['expected']}, {s['duplicates']} duplicates, "
                  f"{s['missing']} missing{logged}")
    for run_name, ranks in report.get("steps_per_rank", {}).items():
        print(f"{run_name}: steps per rank {ranks}")
    print("AUDIT OK: every element trained exactly as planned" if report["ok"] else "AUDIT FAILED")


def _name(x: dict[str, Any]) -> str:
    if "document" in x:
        where = f"{x['source']}[{x['source_index']}]" if "source" in x else f"document {x['document']}"
        text = f"{where} position {x['position']}"
    elif "source" in x:
        text = f"{x['source']}[{x['source_index']}] (sample {x['index']})"
    else:
        text = f"sample {x['index']}" + (" (not in the dataset)" if x.get("outside_dataset") else "")
    return text + (f" x{x['copies']}" if x["copies"] != 1 else "")
