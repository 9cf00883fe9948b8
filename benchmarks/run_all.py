"""Every benchmark, interleaved, then RESULTS.md. Run inside the bench venv (see README.md).

    python -m benchmarks.run_all [--scale 0.025] [--reps 3] [--kind tokens] [--peer mosaic …]
                                 [--large-images 0.3]

For each kind: pack with every available library (repetitions interleaved: A B C A B C …),
read each packed set once untimed (page cache hot, one-time work such as mosaic's shard
decompression done), then the timed read repetitions, interleaved over (library, W) and the
raw-limit loop with 1 and 2 processes. Every measurement runs in its own process
(benchmarks/measure.py). Records go to ``benchmarks/results/run-<UTC time>.jsonl`` as they
arrive; RESULTS.md and the plot are regenerated from that file at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import data, report, token_blocks_run
from benchmarks.measure import run_child
from benchmarks.peers import all_peers, mixture_peers
from benchmarks.scenarios import SCENARIOS

RESULTS_DIR = Path(__file__).parent / "results"
DEFAULT_SCALE = 0.025
LARGE_PEERS = ("shardkit", "litdata-none")  # the fastest peer at W=0 on images
EXTRA_KINDS = ("mixture", "token-blocks")  # records labelled "mixture" and "token blocks"
MIN_TIMED_SAMPLES = 20_000  # images at 0.025 are 2,304 samples: 9 passes, not a 0.1 s window


class Recorder:
    """Appends records to the run's JSONL file and echoes a one-line summary to stderr."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "a")
        self.started = time.monotonic()

    def write(self, record: dict[str, Any], **tags: Any) -> dict[str, Any]:
        record = {**record, **tags, "loadavg_1m": round(os.getloadavg()[0], 2)}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        elapsed = time.monotonic() - self.started
        what = record.get("error") or f"{record.get('samples_per_s')}/s ok={record.get('ok')}"
        print(f"[{elapsed:6.0f}s] {record.get('event', '?'):5} {tags} {what}", file=sys.stderr)
        return record


def _common(kind: str, scale: float) -> list[str]:
    return ["--kind", kind, "--scale", str(scale)]


def passes_for(num_samples: int) -> int:
    """Timed reads go over a small set several times: at least MIN_TIMED_SAMPLES per read."""
    return max(1, -(-MIN_TIMED_SAMPLES // max(num_samples, 1)))


def run_kind(rec: Recorder, kind: str, args: argparse.Namespace, peers: list[str],
             scale: float | None = None, label: str | None = None) -> None:
    """All of one kind's measurements. With ``scale`` (a second, larger set of the same kind),
    records are labelled ``kind@scale`` so the report gives that set tables of its own;
    ``label`` names the records otherwise (``mixture``: the tokens corpus as 4 sources)."""
    label = label or (kind if scale is None else f"{kind}@{scale:g}")
    scale = args.scale if scale is None else scale
    source = data.load(kind, scale)
    rec.write({"event": "data", **source.meta}, kind=label)
    common = _common(kind, scale)
    timed = [*common, "--passes", str(passes_for(source.num_samples))]
    for rep in range(1, args.reps + 1):
        for peer in peers:
            for record in run_child("benchmarks.pack", ["--peer", peer, *common]):
                rec.write(record, event="pack", peer=peer, kind=label, rep=rep)
    raw_blocks = ["shardkit", "own"] if "shardkit" in peers else ["own"]
    for scenario in SCENARIOS.values():
        urls = {p: scenario.prepare(source.packed_dir(p), p) for p in peers}
        for peer in peers:  # untimed warm-up read
            warm_args = ["--peer", peer, "--url", urls[peer], *common]
            for record in run_child("benchmarks.read", warm_args):
                rec.write(record, event="read", peer=peer, kind=label, rep=0, warmup=True,
                          scenario=scenario.name)
        for rep in range(1, args.reps + 1):
            for peer in peers:
                for workers in args.workers:
                    scenario.before_read(peer)
                    child_args = ["--peer", peer, "--url", urls[peer], "--workers", str(workers)]
                    for record in run_child("benchmarks.read", [*child_args, *timed]):
                        rec.write(record, event="read", peer=peer, kind=label, rep=rep,
                                  workers=workers, scenario=scenario.name)
            for blocks in raw_blocks:
                for procs in (1, 2):
                    raw_args = ["--blocks", blocks, "--procs", str(procs), *timed]
                    for record in run_child("benchmarks.raw", raw_args):
                        rec.write(record, event="raw", peer=f"raw-{blocks}", kind=label, rep=rep,
                                  workers=procs, scenario=scenario.name)


def run_extra(rec: Recorder, kinds: list[str], args: argparse.Namespace, peers: list[str]) -> None:
    """The 4-source mixture of the tokens corpus (shardkit only; its yardstick is the tokens
    kind's rows) and token blocks (benchmarks/token_blocks_run.py), in the same run file."""
    if "mixture" in kinds and "shardkit" in peers:
        mix = [p.name for p in mixture_peers() if not args.peer or p.name in args.peer or "shardkit" in args.peer]
        run_kind(rec, "tokens", args, mix, label="mixture")
    if "token-blocks" in kinds and (not args.peer or {"shardkit", "litdata-none"} & set(args.peer)):
        token_blocks_run.run(rec, args.scale, args.reps, args.workers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE,
                        help=f"fraction of 2M token / 100k image samples (default {DEFAULT_SCALE})")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--kind", choices=[*data.KINDS, *EXTRA_KINDS], action="append")
    parser.add_argument("--peer", action="append", help="only these configurations")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--no-report", action="store_true", help="don't rewrite RESULTS.md")
    parser.add_argument("--large-images", type=float, metavar="SCALE",
                        help="also measure images at this scale, a set of many shards "
                             "(0.3: 30,000 samples, 39 shards of 64 MiB), where per-shard costs show")
    parser.add_argument("--large-peer", action="append",
                        help=f"configurations for --large-images (default: {', '.join(LARGE_PEERS)})")
    args = parser.parse_args(argv)

    env = report.environment()
    peers = []
    for peer in all_peers():
        if args.peer and peer.name not in args.peer:
            continue
        reason = peer.unavailable_reason()
        env["peers"][peer.name] = {"version": peer.version(), "unavailable": reason}
        if reason is None:
            peers.append(peer.name)
        else:
            print(f"skipping {peer.name}: {reason}", file=sys.stderr)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    rec = Recorder(RESULTS_DIR / f"run-{stamp}.jsonl")
    rec.write({"event": "env", **env, "scale": args.scale, "reps": args.reps})
    kinds = args.kind or [*data.KINDS, *EXTRA_KINDS]
    for kind in (k for k in kinds if k in data.KINDS):
        run_kind(rec, kind, args, peers)
    run_extra(rec, kinds, args, peers)
    if args.large_images:
        large = [p for p in peers if p in (args.large_peer or LARGE_PEERS)]
        run_kind(rec, "images", args, large, scale=args.large_images)
    rec.write({"event": "done", "wall_s": round(time.monotonic() - rec.started, 1)})
    print(f"results: {rec.path}", file=sys.stderr)
    if not args.no_report:
        report.write_report(rec.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
