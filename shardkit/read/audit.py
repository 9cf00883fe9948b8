"""``shardkit audit``: prove what a (possibly killed and resumed) run trained (specs/resume-state.md
R15). Reads the audit folder (read/audit_lines.py) and checks, per epoch, that every sample was
trained exactly as often as the epoch's plan holds it: once (less the samples the epoch's last
plan drops with ``tail="drop"``, R3), ``m_j`` times for a weighted run (``sample_weights=``,
SW1, SW4), or its count in the mixture's epoch multiset (MX1, MX2, MX17; planned from the
mixture file as it is now, so not a run resumed with a new mix). Lost and duplicated samples
are named: global index, and for a mixture the source and the index in it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardkit.read.audit_lines import committed_lines, planned_drops

Multiplicities = Callable[[int], np.ndarray]  # epoch -> m_j per sample (manifest / mixture order)
NAMED = 20  # lost / duplicated elements listed per epoch (the totals are always given)


@dataclass(frozen=True)
class Names:
    """How a global sample index is named: a plain dataset's ``sample j``, a mixture's
    ``source[i]`` (the index in its source) from each source's first global index."""

    sources: tuple[str, ...] = ()
    bases: tuple[int, ...] = field(default=())

    def of(self, index: int) -> dict[str, Any]:
        if not self.sources or index < 0:
            return {"index": index}
        k = int(np.searchsorted(np.asarray(self.bases), index, side="right")) - 1
        return {"index": index, "source": self.sources[k], "source_index": index - self.bases[k]}


def audit(audit_dir: str, num_samples: int, epochs: int, multiplicities: Multiplicities | None = None,
          names: Names | None = None, named: int = NAMED) -> dict[str, Any]:
    """The audit report; ``multiplicities``: a weighted or mixture run's counts per epoch (None:
    once each). Samples the epoch's last plan dropped (``tail="drop"``) are expected missing."""
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
        entry = weighted_epoch(epoch, ids, np.maximum(expected, 0), names or Names(), named)
        entry["planned_drops"] = sum(dropped.values())
        entry["drops_beyond_epoch"] = int(np.count_nonzero(expected < 0))
        if multiplicities is None:
            entry = {key: entry[key] for key in ("epoch", "samples", "distinct", "duplicates", "missing",
                                                 "planned_drops", "drops_beyond_epoch", "lost", "duplicated")}
        report["epochs"].append(entry)
    steps: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for line in lines:
        if "ids" in line:
            steps[f"run{line['run']}"][line["rank"]] += 1
    report["steps_per_rank"] = {run: dict(sorted(c.items())) for run, c in sorted(steps.items())}
    report["ok"] = all(e["duplicates"] == 0 and e["missing"] == 0 and e["drops_beyond_epoch"] == 0
                       for e in report["epochs"])
    return report


def weighted_epoch(epoch: int, ids: collections.Counter[int], expected: np.ndarray,
                   names: Names | None = None, named: int = NAMED) -> dict[str, Any]:
    """One epoch: sample ``j`` must be trained exactly ``expected[j]`` times; an id outside the
    dataset counts as a duplicate. ``lost``/``duplicated``: the first ``named`` samples off, by name."""
    names = names or Names()
    got = np.zeros(len(expected), dtype=np.int64)
    known = {i: c for i, c in ids.items() if 0 <= i < len(expected)}
    got[np.array(list(known), dtype=np.int64)] = np.array(list(known.values()), dtype=np.int64)
    over, under = np.maximum(got - expected, 0), np.maximum(expected - got, 0)
    foreign = sorted(i for i in ids if i not in known)
    lost = [{**names.of(int(j)), "copies": int(under[j])} for j in np.flatnonzero(under)[:named]]
    extra = [{**names.of(int(j)), "copies": int(over[j])} for j in np.flatnonzero(over)[:named]]
    extra += [{"index": i, "copies": ids[i], "outside_dataset": True} for i in foreign[:max(named - len(extra), 0)]]
    return {
        "epoch": epoch,
        "samples": sum(ids.values()),
        "expected": int(expected.sum()),
        "distinct": len(ids),
        "duplicates": int(over.sum()) + sum(ids[i] for i in foreign),
        "missing": int(under.sum()),
        "samples_off": int(np.count_nonzero(over + under)) + len(foreign),
        "lost": {"total": int(np.count_nonzero(under)), "first": lost},
        "duplicated": {"total": int(np.count_nonzero(over)) + len(foreign), "first": extra},
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
    total, of, _ = mixture_expectation(data, seed, shuffle, storage_options)
    return total, of


def mixture_expectation(data: str, seed: int = 0, shuffle: bool = True,
                        storage_options: dict[str, Any] | None = None) -> tuple[int, Multiplicities, Names]:
    """:func:`mixture_multiplicities` and the names of the mixture's samples (source, index)."""
    from shardkit.plan import PlanParams  # noqa: PLC0415 - only for a mixture
    from shardkit.plan.mixture.state import mixture_plan  # noqa: PLC0415
    from shardkit.read.mixture.config import load_mixture, open_mixture  # noqa: PLC0415

    spec = open_mixture(load_mixture(data), storage_options).spec()
    sizes = [source.num_samples for source in spec.sources]
    total = sum(sizes)

    def of(epoch: int) -> np.ndarray:
        plan = mixture_plan(spec, PlanParams(seed=seed, epoch=epoch, batch_size=1, shuffle=shuffle))
        ids = [w.global_indices(plan.shard_offsets) for w in plan.consumer_windows(0)]
        return np.bincount(np.concatenate(ids + [np.zeros(0, dtype=np.int64)]), minlength=total)

    bases = tuple(int(b) for b in np.cumsum([0, *sizes])[:-1])
    return total, of, Names(tuple(spec.names), bases)
