"""Audit what a (possibly killed and resumed) training run actually trained.

Reads the per-rank audit lines of ``examples/train_ddp.py`` (``runNNN-rankR.jsonl``) and the
per-run ``runNNN.json`` (the checkpoint step each run resumed from). Steps of a run after the
step the next run resumed from were lost with the kill and trained again, so they are dropped;
what remains is what the model state has seen. Prints, per epoch: samples, distinct ids,
duplicates, ids never seen; and per run: steps per rank. Exit 1 on any duplicate or missing id.

    python tools/audit.py AUDIT_DIR --num-samples N [--epochs E] [--json]
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import sys
from typing import Any


def committed_steps(audit_dir: str) -> list[dict[str, Any]]:
    runs = sorted(int(m.group(1)) for f in os.listdir(audit_dir) if (m := re.match(r"run(\d+)\.json$", f)))
    lines: list[dict[str, Any]] = []
    for n, run in enumerate(runs):
        limit = None
        if n + 1 < len(runs):
            with open(os.path.join(audit_dir, f"run{runs[n + 1]:03d}.json")) as fh:
                limit = json.load(fh)["resumed_from_step"]
        for path in sorted(glob.glob(os.path.join(audit_dir, f"run{run:03d}-rank*.jsonl"))):
            rank = int(re.search(r"rank(\d+)", path).group(1))  # type: ignore[union-attr]
            with open(path) as fh:
                for raw in fh:
                    if not raw.endswith("\n"):
                        continue  # a line cut by SIGKILL
                    line = json.loads(raw)
                    if limit is None or line["step"] <= limit:
                        lines.append({**line, "rank": rank})
    return lines


def audit(audit_dir: str, num_samples: int, epochs: int) -> dict[str, Any]:
    lines = committed_steps(audit_dir)
    report: dict[str, Any] = {"epochs": [], "steps_per_rank": {}}
    for epoch in range(epochs):
        ids = collections.Counter(i for line in lines if line["epoch"] == epoch for i in line["ids"])
        report["epochs"].append({
            "epoch": epoch,
            "samples": sum(ids.values()),
            "distinct": len(ids),
            "duplicates": sum(c - 1 for c in ids.values() if c > 1),
            "missing": num_samples - len(ids),
        })
    steps: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for line in lines:
        steps[f"run{line['run']}"][line["rank"]] += 1
    report["steps_per_rank"] = {run: dict(sorted(c.items())) for run, c in sorted(steps.items())}
    report["ok"] = all(e["duplicates"] == 0 and e["missing"] == 0 for e in report["epochs"])
    return report


def main() -> int:
    p = argparse.ArgumentParser(description="prove every sample was trained exactly once")
    p.add_argument("audit_dir")
    p.add_argument("--num-samples", type=int, required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    report = audit(args.audit_dir, args.num_samples, args.epochs)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        for e in report["epochs"]:
            print(f"epoch {e['epoch']}: {e['samples']} samples trained, {e['distinct']} distinct of "
                  f"{args.num_samples}, duplicates {e['duplicates']}, missing {e['missing']}")
        for run, ranks in report["steps_per_rank"].items():
            print(f"{run}: steps per rank {ranks}")
        print("AUDIT OK: every sample exactly once" if report["ok"] else "AUDIT FAILED")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
