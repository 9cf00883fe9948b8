"""Audit, token by token, what a (possibly killed and resumed) ``examples/train_lm.py`` run trained.

The token sibling of ``tools/audit.py`` (same run files, same rule: steps of a run after the
step the next run resumed from were lost with the kill and are dropped). Each audit line holds
the (sample, position) pairs of one step; the expected pairs of an epoch are every input
position of every document (specs/token-blocks.md TB1: its segment length in concat mode, one
less in pack mode), from the dataset's token lengths and the run's token settings. Prints per
epoch: pairs trained, duplicates, missing; exit 1 on any duplicate or missing pair.

    python tools/audit_tokens.py AUDIT_DIR --data PATH [--epochs E] [--json]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import sys
from typing import Any

from shardkit.read import open_dataset
from shardkit.read.token_lengths import document_lengths


def _audit_tool() -> Any:
    path = os.path.join(os.path.dirname(__file__), "audit.py")
    spec = importlib.util.spec_from_file_location("shardkit_audit_tool", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected_positions(data: str, tokens: dict[str, Any]) -> list[int]:
    """Input positions per sample (manifest order) under the run's token settings."""
    extra = int(tokens.get("bos_id") is not None) + int(tokens.get("eos_id") is not None)
    lengths = document_lengths(open_dataset(data), tokens["field"])
    segments = [int(n) + extra if n else 0 for n in lengths]
    return segments if tokens["mode"] == "concat" else [max(n - 1, 0) for n in segments]


def audit(audit_dir: str, data: str, epochs: int) -> dict[str, Any]:
    with open(os.path.join(audit_dir, "run000.json")) as fh:
        tokens = json.load(fh)["tokens"]
    positions = expected_positions(data, tokens)
    lines = _audit_tool().committed_steps(audit_dir)
    report: dict[str, Any] = {"epochs": []}
    for epoch in range(epochs):
        pairs = collections.Counter(tuple(p) for line in lines if line["epoch"] == epoch for p in line["pairs"])
        expected = {(s, o) for s, n in enumerate(positions) for o in range(n)}
        report["epochs"].append({
            "epoch": epoch,
            "pairs": sum(pairs.values()),
            "expected": len(expected),
            "duplicates": sum(c - 1 for c in pairs.values() if c > 1),
            "missing": len(expected - set(pairs)),
            "unexpected": len(set(pairs) - expected),
        })
    report["ok"] = all(e["duplicates"] == e["missing"] == e["unexpected"] == 0 for e in report["epochs"])
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("audit_dir")
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    report = audit(args.audit_dir, args.data, args.epochs)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for e in report["epochs"]:
            print(f"epoch {e['epoch']}: {e['pairs']} token positions trained of {e['expected']}, "
                  f"{e['duplicates']} duplicates, {e['missing']} missing, {e['unexpected']} unexpected")
        print("OK: every token trained exactly once" if report["ok"] else "FAILED")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
