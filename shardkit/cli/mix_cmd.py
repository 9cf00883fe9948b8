"""``shardkit plan MIX.toml``: what an epoch of a mixture draws from each source (specs/mixture.md).

Called by the plan command when its path is a mixture file (``.toml``/``.json``); takes the same
arguments. Per source: samples in the epoch, its share, passes (each sample taken floor or ceil
of them), where the epoch starts in the source's passes, and samples per step; a source with
per-sample weights (MX17) also its pass length and the multiplicity range of a pass.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from shardkit.cli.common import UsageError, print_json, storage_options
from shardkit.errors import CorruptShardError, PlanError
from shardkit.plan import PlanParams
from shardkit.plan.mixture.spec import MixSpec
from shardkit.plan.mixture.state import mixture_plan
from shardkit.plan.mixture.weights import pass_length
from shardkit.plan.sample_weights import SampleWeights
from shardkit.read.mixture.config import load_mixture, open_mixture

EXIT_USAGE = 2


def run(args: argparse.Namespace) -> int:
    _refuse_dataset_options(args)
    try:  # an unusable description or an unreadable source: exit 2 like an unreadable dataset
        opened = open_mixture(load_mixture(args.path), storage_options(args))
        spec = opened.spec()
    except CorruptShardError:  # bad bytes in a source (e.g. met counting its tokens): exit 1
        raise
    except (ValueError, OSError) as exc:
        if isinstance(exc, PlanError) and args.path not in str(exc):  # found once the sources are open
            exc = PlanError(f"{args.path}: {exc}")
        exc.exit_code = EXIT_USAGE  # type: ignore[union-attr]
        raise exc from None
    try:  # parameters no plan can have (too many consumers), or an epoch past int64 cursors: exit 2
        params = PlanParams(seed=args.seed, epoch=args.epoch, world_size=args.world_size, num_workers=args.workers,
                            batch_size=args.batch_size, tail=args.tail, shuffle=not args.no_shuffle,
                            shuffle_window=args.shuffle_window, interleave=getattr(args, "interleave", 1))
        report = explain(spec, params, [ds.url for ds in opened.datasets])
    except PlanError as exc:
        raise UsageError(f"{args.path}: {exc}") from None
    if args.json:
        print_json(report)
        return 0
    _print(report, params)
    return 0


def _refuse_dataset_options(args: argparse.Namespace) -> None:
    """Options of ``plan DATASET`` that a mixture's plan has no use for are refused, not ignored."""
    if getattr(args, "quality", None):
        raise UsageError(f"{args.path}: --quality measures one dataset; run it on a source of the mixture")
    if getattr(args, "spread", None) is not None:
        raise UsageError(f"{args.path}: --spread does not apply to a mixture (its plan interleaves the "
                         "sources itself, specs/mixture.md); leave it out")


def explain(spec: MixSpec, params: PlanParams, urls: list[str]) -> dict[str, Any]:
    """Per-source counts, passes and steps of ``params.epoch``, and the partition's figures."""
    plan = mixture_plan(spec, params)
    total = spec.samples_per_epoch
    per_step = params.world_size * params.batch_size
    rows = []
    for source, url, weight, count, cursor in zip(spec.sources, urls, spec.weights(params.epoch),
                                                  spec.counts(params.epoch), spec.cursors(params.epoch), strict=True):
        n, q, c = source.num_samples, int(count), int(cursor)
        rows.append({
            "name": source.name, "url": url, "num_samples": n, "weight": weight, "samples_per_epoch": q,
            "share": q / total if total else 0.0,
            "passes": q / n if n else 0.0,
            "repeats": [q // n, -(-q // n)] if n else [0, 0],
            "first_pass": c // n if n else 0, "pass_position": c % n if n else 0,
            "samples_per_step": q * per_step / total if total else 0.0,
        })
        if source.sample_weights is not None:  # passes of L elements, not of N samples (MX17)
            rows[-1].update(weighted(source.sample_weights, q, c))
    return {
        "epoch": params.epoch, "samples_per_epoch": total, "composition": spec.composition,
        "interleave": plan.params.interleave,  # the lanes the plan read with (P13)
        "weight_unit": spec.unit, "steps_per_rank": plan.steps_per_rank, "num_consumers": plan.num_consumers,
        "num_dropped": plan.num_dropped, "num_padded": plan.num_padded, "sources": rows,
        "segments": segments(spec, params),
    }


def weighted(weights: SampleWeights, count: int, cursor: int) -> dict[str, Any]:
    """A weighted source's passes (MX17): ``L`` elements each, each sample ``floor``/``ceil`` of
    its expected multiplicity per pass (``w_j L / sum(w)``)."""
    length = pass_length(weights)
    expected = weights.weights.astype(np.float64) * length / weights.total if length else np.zeros(1)
    return {"sample_weights": {"where": weights.where, "fingerprint": weights.fingerprint, "pass_length": length,
                               "zero_weight": int(weights.num_samples - length),
                               "multiplicity_per_pass": [int(np.floor(expected.min())), int(np.ceil(expected.max()))],
                               "expected_per_pass": [float(expected.min()), float(expected.max())]},
            "passes": count / length if length else 0.0,
            "repeats": [int(np.floor(expected.min())) * (count // length) if length else 0,
                        int(np.ceil(expected.max())) * -(-count // length) if length else 0],
            "first_pass": cursor // length if length else 0, "pass_position": cursor % length if length else 0}


def segments(spec: MixSpec, params: PlanParams) -> list[dict[str, Any]]:
    """The pieces of the epoch between weight changes (MX11): where each starts (mixed position
    and rank step), its weights and its exact per-source counts."""
    per_step = params.world_size * params.batch_size
    return [{"first_sample": g.first_sample, "end": g.end, "first_step": g.first_sample / per_step,
             "weights": dict(zip(spec.names, g.weights, strict=True)),
             "samples": dict(zip(spec.names, g.counts.tolist(), strict=True))}
            for g in spec.segments(params.epoch)]


def _print(report: dict[str, Any], params: PlanParams) -> None:
    print(f"mixture of {len(report['sources'])} sources, {report['samples_per_epoch']} samples per epoch, "
          f"composition={report['composition']}")
    print(f"epoch {params.epoch}: {params.world_size} ranks x {params.workers_per_rank} consumers, batch "
          f"{params.batch_size}, tail={params.tail} -> {report['steps_per_rank']} steps per rank (every rank)")
    print(f"dropped {report['num_dropped']} samples, padded {report['num_padded']} repeats")
    if len(report["segments"]) > 1:
        print(f"the mix changes inside the epoch: {len(report['segments'])} segments (weights in "
              f"{report['weight_unit']})")
        for g in report["segments"]:
            counts = ", ".join(f"{name} {n}" for name, n in g["samples"].items())
            print(f"  samples {g['first_sample']}..{g['end'] - 1} (from step {g['first_step']:g}): {counts}")
    print(f"{'source':>12} {'samples':>10} {'epoch':>10} {'share':>7} {'passes':>8} {'repeats':>8} "
          f"{'starts at':>16} {'per step':>9}")
    for row in report["sources"]:
        low, high = row["repeats"]
        repeats = f"{low}" if low == high else f"{low}|{high}"
        start = f"pass {row['first_pass']} @{row['pass_position']}"
        print(f"{row['name']:>12} {row['num_samples']:>10} {row['samples_per_epoch']:>10} "
              f"{row['share']:>7.2%} {row['passes']:>8.3f} {repeats:>8} {start:>16} {row['samples_per_step']:>9.2f}")
    for row in report["sources"]:
        if "sample_weights" in row:
            w = row["sample_weights"]
            low, high = w["multiplicity_per_pass"]
            print(f"{row['name']}: weighted by {w['where']}: a pass is {w['pass_length']} elements "
                  f"({w['zero_weight']} samples of weight 0 left out), each sample {low}..{high} times per pass "
                  f"(expected {w['expected_per_pass'][0]:.3g}..{w['expected_per_pass'][1]:.3g}); passes, repeats "
                  f"and the start count these elements")
