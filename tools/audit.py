"""Audit what a (possibly killed and resumed) training run actually trained.

Reads the per-rank audit lines of ``examples/train_ddp.py`` (``runNNN-rankR.jsonl``) and the
per-run ``runNNN.json`` (the checkpoint step each run resumed from). Steps of a run after the
step the next run resumed from were lost with the kill and trained again, so they are dropped;
what remains is what the model state has seen. Prints, per epoch: samples, distinct ids,
duplicates, ids never seen; and per run: steps per rank. Exit 1 on any duplicate or missing id.
Samples the epoch's last plan drops (``tail="drop"``, the default) are not missing: rank 0 of
``train_ddp.py`` writes them (``"dropped"`` lines, from ``ShardLoader.planned_drops()``), and the
audit expects exactly those absent (specs/resume-state.md R3).

A weighted run (``sample_weights=``, specs/sample-weights.md) trains sample ``j`` exactly
``m_j`` times per epoch (SW1, SW4): with ``--sample-weights`` (the numeric field, or a ``.npy``
of one weight per sample) the audit recomputes every epoch's multiplicities from the dataset
and counts, per sample, copies beyond ``m_j`` as duplicates and copies short of it as missing.

A mixture run (``--data MIX.toml``, ids = the mixture's ``_index``: source base + index in the
source) trains each sample as often as the mixture's epoch multiset holds it (specs/mixture.md
MX1, MX2; with per-sample weights in a source, its weighted passes, MX17): the audit plans each
epoch from the mixture file as it is now (so not a run resumed with a new mix) and checks every
sample of every source against its count, as for a weighted run.

    python tools/audit.py AUDIT_DIR --num-samples N [--epochs E] [--json]
    python tools/audit.py AUDIT_DIR --data DATASET --sample-weights FIELD|W.npy
        [--samples-per-epoch T] [--seed S] [--endpoint-url URL] [--epochs E] [--json]
    python tools/audit.py AUDIT_DIR --data MIX.toml [--seed S] [--no-shuffle] [--epochs E] [--json]
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

Multiplicities = Callable[[int], np.ndarray]  # epoch -> m_j per sample (manifest order)


def committed_steps(audit_dir: str) -> list[dict[str, Any]]:
    """The committed step lines (what was trained: ``"ids"``, or a token run's ``"pairs"``) of
    every run, with their rank; rank 0's ``"dropped"`` lines left out."""
    return [line for line in committed_lines(audit_dir) if "dropped" not in line]


def committed_lines(audit_dir: str) -> list[dict[str, Any]]:
    """Every committed audit line: steps, and rank 0's ``"dropped"`` lines (one per epoch iteration)."""
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


def planned_drops(lines: list[dict[str, Any]], epoch: int) -> collections.Counter[int]:
    """The samples the epoch's last plan drops (``tail="drop"``, R3): from the ``"dropped"``
    line of the last run that iterated the epoch (rank 0 writes one per epoch iteration)."""
    records = [line for line in lines if line["epoch"] == epoch and "dropped" in line]
    if not records:
        return collections.Counter()
    return collections.Counter(max(records, key=lambda line: (line["run"], line["step"]))["dropped"])


def audit(audit_dir: str, num_samples: int, epochs: int,
          multiplicities: Multiplicities | None = None) -> dict[str, Any]:
    """The audit report; ``multiplicities``: a weighted run's ``m_j`` per epoch (None: once each).
    Samples the epoch's last plan dropped (``tail="drop"``) are expected missing, not lost."""
    lines = committed_lines(audit_dir)
    report: dict[str, Any] = {"epochs": [], "steps_per_rank": {}}
    for epoch in range(epochs):
        ids = collections.Counter(i for line in lines if line["epoch"] == epoch for i in line.get("ids", ()))
        dropped = planned_drops(lines, epoch)
        if multiplicities is None:
            expected = np.ones(num_samples, dtype=np.int64)
        else:
            expected = multiplicities(epoch).astype(np.int64, copy=True)
        for index, count in dropped.items():
            if 0 <= index < len(expected):
                expected[index] -= count
        entry = weighted_epoch(epoch, ids, np.maximum(expected, 0))
        entry["planned_drops"] = sum(dropped.values())
        entry["drops_beyond_epoch"] = int(np.count_nonzero(expected < 0))
        if multiplicities is None:
            entry = {key: entry[key] for key in ("epoch", "samples", "distinct", "duplicates", "missing",
                                                 "planned_drops", "drops_beyond_epoch")}
        report["epochs"].append(entry)
    steps: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for line in lines:
        if "dropped" not in line:
            steps[f"run{line['run']}"][line["rank"]] += 1
    report["steps_per_rank"] = {run: dict(sorted(c.items())) for run, c in sorted(steps.items())}
    report["ok"] = all(e["duplicates"] == 0 and e["missing"] == 0 and e["drops_beyond_epoch"] == 0
                       for e in report["epochs"])
    return report


def weighted_epoch(epoch: int, ids: collections.Counter[int], expected: np.ndarray) -> dict[str, Any]:
    """One epoch of a weighted run: sample ``j`` must be trained exactly ``expected[j]`` times;
    an id outside the dataset counts as a duplicate."""
    got = np.zeros(len(expected), dtype=np.int64)
    known = {i: c for i, c in ids.items() if 0 <= i < len(expected)}
    got[np.array(list(known), dtype=np.int64)] = np.array(list(known.values()), dtype=np.int64)
    over, under = np.maximum(got - expected, 0), np.maximum(expected - got, 0)
    return {
        "epoch": epoch,
        "samples": sum(ids.values()),
        "expected": int(expected.sum()),
        "distinct": len(ids),
        "duplicates": int(over.sum()) + sum(c for i, c in ids.items() if i not in known),
        "missing": int(under.sum()),
        "samples_off": int(np.count_nonzero(over + under)),
    }


def weighted_multiplicities(data: str, sample_weights: str, samples_per_epoch: int | None = None, seed: int = 0,
                            storage_options: dict[str, Any] | None = None) -> Multiplicities:
    """``m_j`` of every epoch of the weighted run over ``data`` (the loader's own rounding, SW2)."""
    from shardkit.plan.sample_weights import SampleWeights, multiplicities  # noqa: PLC0415 - only when weighted
    from shardkit.read import open_dataset  # noqa: PLC0415
    from shardkit.read.field_values import read_numeric_field  # noqa: PLC0415

    dataset = open_dataset(data, storage_options)
    if sample_weights.endswith(".npy"):
        values, where = np.load(sample_weights, allow_pickle=False), f"weights file {sample_weights}"
    else:
        values, where = read_numeric_field(dataset, sample_weights), f"field {sample_weights!r} of {dataset.url}"
    weights = SampleWeights(values, dataset.manifest.shard_sizes, where)
    total = dataset.manifest.num_samples if samples_per_epoch is None else samples_per_epoch
    return lambda epoch: multiplicities(weights, total, seed, epoch)


def mixture_multiplicities(data: str, seed: int = 0, shuffle: bool = True,
                           storage_options: dict[str, Any] | None = None) -> tuple[int, Multiplicities]:
    """The mixture's samples (all sources) and each epoch's count of every sample, by the
    mixture's global index, from its plan for one consumer (the loader's own plan, MX1, MX17)."""
    from shardkit.plan import PlanParams  # noqa: PLC0415 - only for a mixture
    from shardkit.plan.mixture_state import mixture_plan  # noqa: PLC0415
    from shardkit.read.mixture import load_mixture, open_mixture  # noqa: PLC0415

    spec = open_mixture(load_mixture(data), storage_options).spec()
    total = sum(source.num_samples for source in spec.sources)

    def of(epoch: int) -> np.ndarray:
        plan = mixture_plan(spec, PlanParams(seed=seed, epoch=epoch, batch_size=1, shuffle=shuffle))
        ids = [w.global_indices(plan.shard_offsets) for w in plan.consumer_windows(0)]
        return np.bincount(np.concatenate(ids + [np.zeros(0, dtype=np.int64)]), minlength=total)

    return total, of


def main() -> int:
    p = argparse.ArgumentParser(description="prove every sample was trained exactly once (or m_j times, weighted)")
    p.add_argument("audit_dir")
    p.add_argument("--num-samples", type=int, default=None, help="the dataset's samples (unweighted runs)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--data", default=None, help="the dataset (weighted runs)")
    p.add_argument("--sample-weights", default=None, help="the run's numeric weight field, or a .npy of weights")
    p.add_argument("--samples-per-epoch", type=int, default=None, help="the run's T (default: the dataset's size)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (it keys the weights' rounding)")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint of --data")
    p.add_argument("--no-shuffle", action="store_true", help="a mixture run without shuffle (its pass orders)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    mixture = args.data is not None and args.data.endswith((".toml", ".json")) and not args.sample_weights
    if not mixture and ((args.sample_weights is None) == (args.num_samples is None)
                        or (args.sample_weights and not args.data)):
        p.error("give --num-samples N, --data DATASET with --sample-weights for a weighted run, "
                "or --data MIX.toml for a mixture run")
    expected = None
    options = {"endpoint_url": args.endpoint_url} if args.endpoint_url else None
    if mixture:
        args.num_samples, expected = mixture_multiplicities(args.data, args.seed, not args.no_shuffle, options)
    elif args.sample_weights:
        expected = weighted_multiplicities(args.data, args.sample_weights, args.samples_per_epoch, args.seed, options)
    report = audit(args.audit_dir, args.num_samples or 0, args.epochs, expected)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        for e in report["epochs"]:
            if "expected" in e:
                print(f"epoch {e['epoch']}: {e['samples']} samples trained of {e['expected']} (weighted), "
                      f"{e['samples_off']} samples off their multiplicity, extra copies {e['duplicates']}, "
                      f"missing copies {e['missing']}")
            else:
                print(f"epoch {e['epoch']}: {e['samples']} samples trained, {e['distinct']} distinct of "
                      f"{args.num_samples}, duplicates {e['duplicates']}, missing {e['missing']}, "
                      f"planned drops {e['planned_drops']} (tail='drop')")
        for run, ranks in report["steps_per_rank"].items():
            print(f"{run}: steps per rank {ranks}")
        weighted = "its multiplicity (weighted)" if expected else "once"
        print(f"AUDIT OK: every sample exactly {weighted}" if report["ok"] else "AUDIT FAILED")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
