"""A new mix for the rest of a started epoch (specs/mixture.md, MX12).

``resume_mixture(..., apply="now")`` keeps what a state's consumers delivered and re-plans the
*remainder* of its epoch (unconsumed real samples plus the dropped tail, R3) with the current
weights: the remainder's ``M`` samples get new exact counts ``q' = largest_remainder(M, w')``;
source ``i`` first takes its untaken samples of the epoch (``U_i``, in remainder order), then,
if ``q'_i > |U_i|``, continues its stream after the epoch's range; untaken samples beyond
``q'_i`` are skipped in their pass (as a dropped tail is). Every source's stream positions stay
contiguous (MX2), and its cursor after the epoch is ``cursor + count + extra``.

The remixed rest is a level-0 source like any epoch: a :class:`MixedSequence` over
:class:`UntakenStream` s, partitioned with equal steps under the resume's params, resumable
exactly and elastically; its state keeps the state it was remixed from under ``remix.base``.
Cost: per rebuild, O(remainder ranges x sources) (about one range per consumer of each level)
plus one window order per window a range cuts; no per-sample arrays (mixture_remainder.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from shardkit.errors import StateError
from shardkit.plan.mixture.remainder import Remainder, UntakenStream
from shardkit.plan.mixture.sequence import MixedSequence, shard_bases_of, source_order
from shardkit.plan.mixture.spec import MixSource, MixSpec, largest_remainder
from shardkit.plan.mixture.weights import source_stream
from shardkit.plan.params import PlanParams
from shardkit.plan.plan import Plan
from shardkit.plan.sequence import SampleSequence
from shardkit.plan.state import build_plan

REMIX_KEY_WORD = -(1 << 20)  # window keys (seed, epoch, REMIX_KEY_WORD - depth): no other key has it
BasePlan = Callable[[np.ndarray, PlanParams], Plan]


@dataclass(frozen=True, eq=False)
class EpochSource:
    """What a (possibly remixed) epoch is planned from: its sources in plan order, its level-0
    builder, digest and what each source's stream advanced (``advance``, for later epochs)."""

    sources: tuple[MixSource, ...]
    base: BasePlan
    digest: str
    cursors: tuple[int, ...]
    advance: tuple[int, ...]
    depth: int = 0

    @property
    def shard_sizes(self) -> np.ndarray:
        return np.concatenate([s.shard_sizes for s in self.sources] + [np.zeros(0, dtype=np.int64)])

    def plan(self, params: PlanParams, resume: dict[str, Any] | None = None) -> Plan:
        return build_plan(self.shard_sizes, params, resume, base=self.base)

    def sequence(self, shard_sizes: np.ndarray, params: PlanParams) -> SampleSequence:
        """The epoch's mixed sequence under ``params`` (what global order cuts, P29)."""
        return self.base(shard_sizes, params).source


def remix(old: EpochSource, base_state: dict[str, Any], spec: MixSpec, weights: dict[str, float],
          composition: str) -> EpochSource:
    """The rest of ``old``'s epoch after ``base_state``'s offsets, under ``weights`` by name
    (sources of ``spec`` not in ``old`` are added after its own)."""
    plan = old.plan(PlanParams.from_dict(base_state["plan"]["params"]), base_state["plan"])
    known = {s.name for s in old.sources}
    sources = old.sources + tuple(s for s in spec.sources if s.name not in known)
    untaken = Remainder(plan.remainder(list(plan.start_offsets)), len(sources))
    totals = untaken.totals.tolist()
    wanted = [Fraction(weights.get(s.name, 0.0)) for s in sources]
    if base_state.get("unit") == "tokens":  # token shares -> sample shares, as MixSpec does (MX13)
        wanted = [w * s.num_samples / s.num_tokens if s.num_tokens else Fraction(0) for w, s in zip(wanted, sources,
                                                                                                    strict=True)]
    counts = largest_remainder(sum(totals), wanted)
    _check_feasible(sources, counts)
    cursors = old.cursors + (0,) * (len(sources) - len(old.sources))
    advance = old.advance + (0,) * (len(sources) - len(old.sources))
    extra = tuple(max(int(q) - u, 0) for q, u in zip(counts, totals, strict=True))
    digest = _digest(base_state, weights, composition, sources)
    depth = old.depth + 1

    def base(all_sizes: np.ndarray, params: PlanParams) -> Plan:

        bases = shard_bases_of(sources)
        streams = [UntakenStream(untaken, i, source_stream(s, source_order(s, params.seed, params.shuffle),
                                                           int(bases[i]), cursors[i] + advance[i], cursors[i],
                                                           params.seed))
                   for i, s in enumerate(sources)]
        key = (params.seed, params.epoch, REMIX_KEY_WORD - depth) if params.shuffle else None
        sequence = MixedSequence(streams, counts.tolist(), composition, params.shuffle_window, params.batch_size, key)
        return Plan(all_sizes, params, sequence)

    return EpochSource(sources, base, digest, cursors, tuple(a + e for a, e in zip(advance, extra, strict=True)), depth)


def _check_feasible(sources: tuple[MixSource, ...], counts: np.ndarray) -> None:
    for source, count in zip(sources, counts, strict=True):
        if count and not source.num_samples:
            raise StateError(f"source {source.name!r} has no samples but the new weights ask for {count}")


def _digest(base_state: dict[str, Any], weights: dict[str, float], composition: str,
            sources: tuple[MixSource, ...]) -> str:
    h = hashlib.blake2b(digest_size=16, person=b"shardkit-remix-2")  # 2: U_i in range/stream order
    h.update(json.dumps([base_state, sorted(weights.items()), composition], sort_keys=True).encode())
    for source in sources:
        h.update(f"|{source.name}|{source.fingerprint}|".encode())
        h.update(source.shard_sizes.astype("<i8").tobytes())
    return "mix:" + h.hexdigest()


def remix_description(epoch_source: EpochSource, state: dict[str, Any], weights: dict[str, float],
                      composition: str) -> dict[str, Any]:
    """The mixture state (without ``plan``) of a remixed epoch: ``count`` is what each source's
    stream advanced in the epoch (taken or skipped), ``remix.base`` the state it came from;
    ``consumed`` (and ``consumed_tokens``) carry over by name from ``state``."""
    before = {e["name"]: e for e in state["sources"]}
    sources = []
    for s, a, c in zip(epoch_source.sources, epoch_source.advance, epoch_source.cursors, strict=True):
        entry: dict[str, Any] = {"name": s.name, "fingerprint": s.fingerprint, "num_samples": s.num_samples,
                                 "weight": float(weights.get(s.name, 0.0)), "count": a, "cursor": c,
                                 "consumed": int(before.get(s.name, {}).get("consumed", 0))}
        if s.sample_weights is not None:
            entry["sample_weights"] = s.weights_fingerprint
        if state.get("unit") == "tokens":
            entry.update(num_tokens=int(s.num_tokens or 0),
                         consumed_tokens=int(before.get(s.name, {}).get("consumed_tokens", 0)))
        sources.append(entry)
    unit = {"unit": state["unit"]} if "unit" in state else {}
    return {"version": 2, "kind": state["kind"], "epoch": state["epoch"],
            "samples_per_epoch": state["samples_per_epoch"], "composition": composition, "sources": sources, **unit,
            "remix": {"base": state, "weights": {k: float(v) for k, v in sorted(weights.items())}}}


def later_spec(spec: MixSpec, epoch: int, epoch_source: EpochSource) -> MixSpec:
    """``spec`` rebased so every source continues after the (remixed) epoch (a new one at 0)."""
    after = {s.name: c + a for s, c, a in zip(epoch_source.sources, epoch_source.cursors, epoch_source.advance,
                                               strict=True)}
    return replace(spec).rebased(epoch + 1, [after.get(s.name, 0) for s in spec.sources])
