"""``shardkit bench PATH``: what can this dataset feed, and where does the time go?"""

from __future__ import annotations

import argparse
from typing import Any

from shardkit.cli.common import (
    add_storage_options,
    dataset_path,
    duration,
    int_at_least,
    print_json,
    storage_options,
)
from shardkit.cli.dataset_cmds import load


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="read a dataset as training would and report what it can feed")
    p.add_argument("path", type=dataset_path, help="dataset folder/URL or its manifest.json")
    p.add_argument("--workers", type=int_at_least(0), default=2)
    p.add_argument("--batch-size", type=int_at_least(1), default=64)
    p.add_argument("--steps", type=int_at_least(1), default=200, help="batches to read (per phase)")
    p.add_argument("--step-time", type=duration, default=None, help="simulate a training step of this long, e.g. 50ms")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--no-shuffle", action="store_true")
    p.add_argument("--tokens", type=int_at_least(1), default=None, metavar="SEQ_LEN",
                   help="read token blocks of SEQ_LEN (batch size counts blocks); report effective tokens/s")
    p.add_argument("--token-field", default="tokens", help="the integer array field of the documents")
    p.add_argument("--token-mode", choices=("concat", "pack"), default="concat")
    p.add_argument("--json", action="store_true")
    add_storage_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    load(args)  # no or unreadable manifest: exit 2 before torch starts, as `verify` does
    from shardkit.loader.bench import BenchOptions, run_bench  # torch is imported only here
    from shardkit.plan.tokens.config import TokenBlocks

    tokens = None if args.tokens is None else TokenBlocks(args.tokens, field=args.token_field, mode=args.token_mode)
    options = BenchOptions(
        tokens=tokens,
        workers=args.workers, batch_size=args.batch_size, steps=args.steps,
        step_time=args.step_time,
        cache_dir=args.cache_dir, shuffle=not args.no_shuffle, storage_options=storage_options(args) or None,
    )
    report = run_bench(args.path, options)
    if report["rank"] != 0:  # under torchrun: every rank has the same cross-rank view; one prints
        return 0
    if args.json:
        print_json(report)
        return 0
    _print(report)
    return 0


def _print(report: dict[str, Any]) -> None:
    t = report["throughput"]
    print(f"{report['path']}: {report['workers']} workers, batch {report['batch_size']}, {t['steps']} steps")
    print(f"  throughput      {t['samples_per_s']:.0f} samples/s, {t['decoded_bytes_per_s'] / 1e6:.1f} MB/s decoded")
    if "tokens_per_s" in t:
        print(f"  tokens          {t['tokens_per_s']:.0f} effective tokens/s, padding {t['padding_fraction']:.1%} "
              f"(blocks of {report['tokens']['seq_len']}, {report['tokens']['mode']})")
    print(f"  first batch     {t['time_to_first_batch_s'] * 1e3:.1f} ms")
    print(f"  wait per step   p50 {t['wait_p50_s'] * 1e3:.2f} ms, p99 {t['wait_p99_s'] * 1e3:.2f} ms")
    stages = t["stages_s"]
    busy = sum(stages.values()) or 1e-9
    print("  worker time     " + ", ".join(f"{k[:-2]} {v / busy:.0%}" for k, v in stages.items())
          + f"; transfer to the training process p50 {t['transfer_p50_s'] * 1e3:.2f} ms")
    cache = t["cache"]
    if cache["cache_hits"] or cache["cache_misses"]:
        print(f"  cache           {cache['cache_hits']:.0f} hits, {cache['cache_misses']:.0f} misses, "
              f"{cache['download_bytes'] / 1e6:.1f} MB downloaded in {cache['download_s']:.1f} s")
    if "ranks" in t:
        _print_ranks(t)
    if "keep_up_ratio" in report:
        verdict = "keeps up" if report["keeps_up"] else "DOES NOT keep up"
        s = report["simulated"]
        print(f"  training needs  {report['consumption_samples_per_s']:.0f} samples/s -> loader/need = "
              f"{report['keep_up_ratio']:.2f} ({verdict}; rule: >= 1.2)")
        print(f"  simulated run   wait p50 {s['wait_p50_s'] * 1e3:.2f} ms, p99 {s['wait_p99_s'] * 1e3:.2f} ms, "
              f"likely bottleneck: {s['likely_bottleneck']}")


def _print_ranks(stats: dict[str, Any]) -> None:
    for r in stats["ranks"]:
        print(f"  rank {r['rank']:<5}     {r['host']}: waits {r['wait_fraction']:.0%} of its time for data, "
              f"{r['samples_per_s']:.0f} samples/s, likely bottleneck: {r['likely_bottleneck']}")
    s = stats["straggler"]
    if s is not None:
        print(f"  straggler       rank {s['rank']} on {s['host']} waits {s['wait_fraction']:.0%} "
              f"(others {s['others_median']:.0%})" + (f"; slowest shard {s['shard']}" if s["shard"] else ""))
