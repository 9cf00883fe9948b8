"""``shardkit audit --tokens``: what a token-block run trained, token by token (specs/resume-state.md
R15, specs/token-blocks.md TB1, TB15). The same audit folder and rule as read/audit.py; each
line holds the (document, position) pairs of one step. The expected pairs of an epoch are every
input position of every document (its segment length in concat mode, one less in pack mode),
from the dataset's token lengths and the run's token settings (``runNNN.json`` ``"tokens"``).
For a mixture the documents are the mixture's epoch multiset from its sample plan for one
consumer (the run's seed), so the audit does not trust the token layer it checks; the report
then also counts per source, against the per-source counts a run logged (``"sources"``).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from shardkit.read.audit import NAMED, Names, mixture_expectation
from shardkit.read.audit_lines import AuditDirError, committed_steps, run_info, run_numbers
from shardkit.read.dataset import open_dataset
from shardkit.read.mixture.config import is_mixture_file, load_mixture, open_mixture
from shardkit.read.tokens.lengths import document_lengths

Pairs = collections.Counter[tuple[int, int]]


def positions_of(lengths: Any, tokens: dict[str, Any]) -> list[int]:
    """Input positions per sample under the run's token settings."""
    extra = int(tokens.get("bos_id") is not None) + int(tokens.get("eos_id") is not None)
    segments = [int(n) + extra if n else 0 for n in lengths]
    return segments if tokens["mode"] == "concat" else [max(n - 1, 0) for n in segments]


class Expected:
    """The pairs each epoch must train, and how a document is named."""

    def __init__(self, data: str, tokens: dict[str, Any], seed: int,
                 storage_options: dict[str, Any] | None = None) -> None:
        self.mixture = None
        if is_mixture_file(data):
            _, self.mixture, self.names = mixture_expectation(data, seed, True, storage_options)
            datasets = open_mixture(load_mixture(data), storage_options).datasets
            lengths = np.concatenate([document_lengths(ds, tokens["field"]) for ds in datasets])
        else:
            lengths, self.names = document_lengths(open_dataset(data, storage_options), tokens["field"]), Names()
        self.positions = positions_of(lengths, tokens)

    def pairs(self, epoch: int) -> Pairs:
        if self.mixture is None:
            return collections.Counter({(s, o): 1 for s, n in enumerate(self.positions) for o in range(n)})
        counts = self.mixture(epoch)
        return collections.Counter({(int(s), o): int(counts[s]) for s in np.flatnonzero(counts)
                                    for o in range(self.positions[int(s)])})

    def name(self, pair: tuple[int, int], copies: int) -> dict[str, Any]:
        named = self.names.of(pair[0])
        return {"document": named.pop("index"), **named, "position": pair[1], "copies": copies}


def _counts(got: Pairs, expected: Pairs) -> dict[str, int]:
    return {"pairs": sum(got.values()), "expected": sum(expected.values()),
            "duplicates": sum(max(c - expected.get(p, 0), 0) for p, c in got.items() if p in expected),
            "missing": sum(max(c - got.get(p, 0), 0) for p, c in expected.items()),
            "unexpected": sum(c for p, c in got.items() if p not in expected)}


def _named(got: Pairs, expected: Pairs, want: Expected, named: int) -> dict[str, Any]:
    lost = sorted((p, c - got.get(p, 0)) for p, c in expected.items() if c > got.get(p, 0))
    extra = sorted((p, c - expected.get(p, 0)) for p, c in got.items() if c > expected.get(p, 0))
    return {"lost": {"total": len(lost), "first": [want.name(p, c) for p, c in lost[:named]]},
            "duplicated": {"total": len(extra), "first": [want.name(p, c) for p, c in extra[:named]]}}


def audit(audit_dir: str, data: str, epochs: int, storage_options: dict[str, Any] | None = None,
          named: int = NAMED) -> dict[str, Any]:
    """The token audit report of ``audit_dir`` against ``data`` (a dataset or a mixture file)."""
    runs = run_numbers(audit_dir)
    first = run_info(audit_dir, runs[0]) if runs else {}
    if not isinstance(first.get("tokens"), dict):
        raise AuditDirError(f"audit folder {audit_dir}: no token settings ('tokens' in its first runNNN.json): "
                            f"not a token-block run (audit it without --tokens)")
    want = Expected(data, first["tokens"], int(first.get("seed", 0)), storage_options)
    lines = committed_steps(audit_dir)
    report: dict[str, Any] = {"epochs": []}
    sources = list(want.names.sources)
    for epoch in range(epochs):
        mine = [line for line in lines if line["epoch"] == epoch]
        pairs = collections.Counter(tuple(p) for line in mine for p in line.get("pairs", ()))
        expected = want.pairs(epoch)
        entry: dict[str, Any] = {"epoch": epoch, **_counts(pairs, expected), **_named(pairs, expected, want, named)}
        if want.mixture is not None:
            logged = [line["sources"] for line in mine if "sources" in line]
            total = np.sum(logged, axis=0) if logged else None
            entry["sources"] = {}
            for k, name in enumerate(sources):
                of_k = [collections.Counter({p: c for p, c in counter.items() if want.names.of(p[0]).get("source")
                                             == name}) for counter in (pairs, expected)]
                entry["sources"][name] = {**_counts(of_k[0], of_k[1]),
                                          "logged": None if total is None else int(total[k])}
        report["epochs"].append(entry)
    report["ok"] = all(e["duplicates"] == e["missing"] == e["unexpected"] == 0 and all(
        s["logged"] is None or s["pairs"] == s["logged"] for s in e.get("sources", {}).values())
        for e in report["epochs"])
    return report
