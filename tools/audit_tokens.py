"""Audit, token by token, what a (possibly killed and resumed) ``examples/train_lm.py`` run trained.

The token sibling of ``tools/audit.py`` (same run files, same rule: steps of a run after the
step the next run resumed from were lost with the kill and are dropped). Each audit line holds
the (sample, position) pairs of one step; the expected pairs of an epoch are every input
position of every document (specs/token-blocks.md TB1: its segment length in concat mode, one
less in pack mode), from the dataset's token lengths and the run's token settings. For a
mixture file (TB15) the documents are the mixture's epoch multiset — a sample its source
repeats within the epoch is expected once per occurrence — found from the mixture's sample
plan for one consumer (the run's seed), so the audit does not trust the token layer it checks;
the report then also counts per source, and compares with the per-source token counts the run
logged from ``_source``. (It plans from the mixture file as it is now: a run resumed with new
weights is not auditable this way.) Prints per epoch: pairs trained, duplicates, missing; exit
1 on any duplicate or missing pair.

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

import numpy as np

from shardkit.read import open_dataset
from shardkit.read.mixture import is_mixture_file
from shardkit.read.token_lengths import document_lengths

Pairs = collections.Counter[tuple[int, int]]


def _audit_tool() -> Any:
    path = os.path.join(os.path.dirname(__file__), "audit.py")
    spec = importlib.util.spec_from_file_location("shardkit_audit_tool", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def positions_of(lengths: Any, tokens: dict[str, Any]) -> list[int]:
    """Input positions per sample under the run's token settings."""
    extra = int(tokens.get("bos_id") is not None) + int(tokens.get("eos_id") is not None)
    segments = [int(n) + extra if n else 0 for n in lengths]
    return segments if tokens["mode"] == "concat" else [max(n - 1, 0) for n in segments]


def expected_positions(data: str, tokens: dict[str, Any]) -> list[int]:
    """Input positions per sample (manifest order) under the run's token settings."""
    return positions_of(document_lengths(open_dataset(data), tokens["field"]), tokens)


class Expected:
    """The pairs each epoch must train, and which source a sample index belongs to."""

    def __init__(self, data: str, tokens: dict[str, Any], seed: int) -> None:
        self.data, self.seed, self.mixture = data, seed, None
        if is_mixture_file(data):
            from shardkit.loader.mixture_dataset import MixtureDataset  # the sample mixture: its plan

            self.mixture = MixtureDataset(data, batch_size=1, seed=seed, tail="drop")
            datasets = self.mixture.opened.datasets
            self.names = list(self.mixture.spec.names)
            lengths = [document_lengths(ds, tokens["field"]) for ds in datasets]
            self.positions = positions_of(np.concatenate(lengths), tokens)
            self.bases = np.cumsum([0] + [len(n) for n in lengths])[:-1]
        else:
            self.names, self.positions, self.bases = ["data"], expected_positions(data, tokens), np.zeros(1, int)

    def pairs(self, epoch: int) -> Pairs:
        if self.mixture is None:
            return collections.Counter((s, o) for s, n in enumerate(self.positions) for o in range(n))
        from shardkit.plan.token_plan import epoch_order

        order = epoch_order(self.mixture.plan(epoch, 1, 0))  # one consumer, batch 1: the epoch multiset
        return collections.Counter((int(s), o) for s in order for o in range(self.positions[int(s)]))

    def source_of(self, index: int) -> int:
        return int(np.searchsorted(self.bases, index, side="right")) - 1


def _counts(got: Pairs, expected: Pairs) -> dict[str, int]:
    return {"pairs": sum(got.values()), "expected": sum(expected.values()),
            "duplicates": sum(max(c - expected.get(p, 0), 0) for p, c in got.items() if p in expected),
            "missing": sum(max(c - got.get(p, 0), 0) for p, c in expected.items()),
            "unexpected": sum(c for p, c in got.items() if p not in expected)}


def audit(audit_dir: str, data: str, epochs: int) -> dict[str, Any]:
    with open(os.path.join(audit_dir, "run000.json")) as fh:
        run = json.load(fh)
    want = Expected(data, run["tokens"], int(run.get("seed", 0)))
    lines = _audit_tool().committed_steps(audit_dir)
    report: dict[str, Any] = {"epochs": []}
    for epoch in range(epochs):
        mine = [line for line in lines if line["epoch"] == epoch]
        pairs = collections.Counter(tuple(p) for line in mine for p in line["pairs"])
        expected = want.pairs(epoch)
        entry: dict[str, Any] = {"epoch": epoch, **_counts(pairs, expected)}
        if want.mixture is not None:
            logged = np.sum([line.get("sources", [0] * len(want.names)) for line in mine] or [[0] * len(want.names)],
                            axis=0)
            entry["sources"] = {}
            for k, name in enumerate(want.names):
                of_k = [collections.Counter({p: c for p, c in counter.items() if want.source_of(p[0]) == k})
                        for counter in (pairs, expected)]
                entry["sources"][name] = {**_counts(of_k[0], of_k[1]), "logged": int(logged[k])}
        report["epochs"].append(entry)
    report["ok"] = all(e["duplicates"] == e["missing"] == e["unexpected"] == 0 and all(
        s["pairs"] == s["logged"] for s in e.get("sources", {}).values()) for e in report["epochs"])
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("audit_dir")
    p.add_argument("--data", required=True, help="the run's --data: a dataset or a mixture file")
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
            for name, s in e.get("sources", {}).items():
                print(f"  {name}: {s['pairs']} of {s['expected']}, {s['duplicates']} duplicates, "
                      f"{s['missing']} missing ({s['logged']} logged by _source)")
        print("OK: every token trained exactly once" if report["ok"] else "FAILED")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
