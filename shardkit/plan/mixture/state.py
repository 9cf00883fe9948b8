"""Plans and resume states of a mixture epoch (specs/mixture.md, MX5-MX9).

A mixture state wraps the plan state of specs/resume-state.md (whose ``fingerprint`` is the
epoch digest of :meth:`MixSpec.digest`) with what the epoch was made of: per source its name,
fingerprint, size, weight, epoch count, cursor and consumed samples. Resuming rebuilds the
interrupted epoch from that saved description - so new weights, added or zero-weighted sources
take effect at the next epoch - and continues every source's stream where it stopped.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardkit.errors import PlanError, StateError
from shardkit.plan.mixture.remix import EpochSource, later_spec, remix, remix_description
from shardkit.plan.mixture.segments import segmented_sequence
from shardkit.plan.mixture.sequence import MixedSequence, shard_bases_of, source_order
from shardkit.plan.mixture.spec import MixSource, MixSpec, ScheduleStep
from shardkit.plan.mixture.state_check import MIX_KIND, MIX_STATE_KEYS, MIX_STATE_VERSION, WEIGHTS_KEY, check_state
from shardkit.plan.mixture.weights import source_stream
from shardkit.plan.params import PlanParams
from shardkit.plan.partition import equal_steps
from shardkit.plan.plan import Plan
from shardkit.plan.sequence import SampleSequence
from shardkit.plan.state import build_plan, plan_to_state, validate_state


def shard_bases(spec: MixSpec) -> np.ndarray:
    """Global index of each source's first shard, and the total (length sources + 1)."""
    return shard_bases_of(spec.sources)


def mixture_shard_sizes(spec: MixSpec) -> np.ndarray:
    """The sources' shard sizes concatenated: the plan's global shard space."""
    return np.concatenate([s.shard_sizes for s in spec.sources] + [np.zeros(0, dtype=np.int64)])


def mixed_sequence(spec: MixSpec, params: PlanParams) -> SampleSequence:
    """Level 0's source: the epoch's mixed sequence (one :class:`MixedSequence` per segment,
    laid out by :func:`segmented_sequence` when the mix changes inside the epoch, MX11);
    O(sources + shards), plus O(consumers x segments) for a segmented epoch."""
    segments, cursors, bases = spec.segments(params.epoch), spec.cursors(params.epoch), shard_bases(spec)
    orders = [source_order(s, params.seed, params.shuffle) for s in spec.sources]
    key = (params.seed, params.epoch) if params.shuffle else None
    parts, first = [], cursors
    for k, segment in enumerate(segments):
        streams = [source_stream(s, orders[i], int(bases[i]), int(cursors[i]), int(first[i]), params.seed)
                   for i, s in enumerate(spec.sources)]
        # segment 0 keeps the key of an unsegmented epoch; later ones add -k (no word of an
        # unsegmented window key is negative but the last, MX11)
        part_key = key if key is None or k == 0 else (*key, -k)
        parts.append(MixedSequence(streams, segment.counts.tolist(), spec.composition, params.shuffle_window,
                                   params.batch_size, part_key))
        cursors = cursors + segment.counts
    if len(parts) == 1:
        return parts[0]
    partition = equal_steps(spec.samples_per_epoch, params)
    return segmented_sequence(parts, [segment.first_sample for segment in segments], partition, params)


def _base(spec: MixSpec, sizes: np.ndarray, params: PlanParams) -> Plan:
    return Plan(sizes, params, mixed_sequence(spec, params))


def mixture_plan(spec: MixSpec, params: PlanParams, resume_plan: dict[str, Any] | None = None) -> Plan:
    """The plan of ``params.epoch`` (P1-P12 and R1-R9 hold as for one dataset); ``resume_plan``
    is the ``plan`` part of a state saved for this very spec (see :func:`resume_mixture`)."""
    return build_plan(mixture_shard_sizes(spec), params, resume_plan, base=functools.partial(_base, spec))


def mixture_to_state(spec: MixSpec, plan: Plan, offsets: Sequence[int],
                     consumed: Sequence[int] | None = None) -> dict[str, Any]:
    """The mixture resume state after consumer ``c`` delivered ``offsets[c]`` samples;
    ``consumed``: real samples delivered per source this epoch (accounting, MX9)."""
    epoch = plan.params.epoch
    return {**mixture_description(spec, epoch, consumed), "plan": plan_to_state(plan, offsets, spec.digest(epoch))}


def mixture_description(spec: MixSpec, epoch: int, consumed: Sequence[int] | None = None,
                        consumed_tokens: Sequence[int] | None = None) -> dict[str, Any]:
    """The mixture state of ``epoch`` without its ``plan`` (what the epoch is made of).

    Version 1 unless the epoch changes its mix inside (``segments``, MX11) or its weights are
    in tokens (``unit``, per-source ``num_tokens`` and ``consumed_tokens``, MX13): version 2.
    """
    counts, cursors = spec.counts(epoch), spec.cursors(epoch)
    tally = _per_source(spec, consumed, "consumed")
    sources = [{"name": s.name, "fingerprint": s.fingerprint, "num_samples": s.num_samples,
                "weight": float(w), "count": int(q), "cursor": int(c), "consumed": t}
               for s, w, q, c, t in zip(spec.sources, spec.weights(epoch), counts, cursors, tally, strict=True)]
    state: dict[str, Any] = {"version": 1, "kind": MIX_KIND, "epoch": epoch,
                             "samples_per_epoch": spec.samples_per_epoch, "composition": spec.composition,
                             "sources": sources}
    segments = spec.segments(epoch)
    if len(segments) > 1:
        state["segments"] = [{"first_sample": g.first_sample, "weights": list(g.weights)} for g in segments[1:]]
    for entry, source in zip(sources, spec.sources, strict=True):
        if source.sample_weights is not None:  # per-sample weights: their fingerprint (MX17)
            entry[WEIGHTS_KEY] = source.weights_fingerprint
    if spec.unit != "samples":
        state["unit"] = spec.unit
        for entry, source, tokens in zip(sources, spec.sources, _per_source(spec, consumed_tokens, "consumed_tokens"),
                                         strict=True):
            entry.update(num_tokens=int(source.num_tokens or 0), consumed_tokens=tokens)
    if len(state) > len(MIX_STATE_KEYS) - 1 or any(WEIGHTS_KEY in entry for entry in sources):
        state["version"] = MIX_STATE_VERSION
    return state


def _per_source(spec: MixSpec, values: Sequence[int] | None, what: str) -> list[int]:
    found = [0] * len(spec.sources) if values is None else [int(c) for c in values]
    if len(found) != len(spec.sources):
        raise StateError(f"{what}: expected {len(spec.sources)} counts (one per source), got {len(found)}")
    return found


APPLY = ("next_epoch", "now")


def resume_mixture(spec: MixSpec, params: PlanParams, state: Any, apply: str = "next_epoch") -> tuple[Plan, MixSpec]:
    """The interrupted epoch's plan (same or new topology) and the mixture for later epochs.

    ``apply="next_epoch"`` (default): the epoch is rebuilt from the state's own description
    (weights, counts, cursors) over the current sources' shards, so a changed mix never alters
    a started epoch (MX8). ``apply="now"``: its remainder is re-planned with ``spec``'s weights
    (MX12). The returned spec is ``spec`` rebased so every source continues its stream after
    that epoch. Raises StateError for a malformed or newer state, a changed or missing source.
    """
    resumed = resume_epoch(spec, params, state, apply)
    return resumed.plan, resumed.later


@dataclass(frozen=True, eq=False)
class ResumedEpoch:
    """A resumed epoch: its plan, the mixture for later epochs, and how to save its states."""

    plan: Plan
    later: MixSpec
    source: EpochSource
    description: dict[str, Any]  # the mixture state without plan (consumed: 0)

    def to_state(self, offsets: Sequence[int], consumed: Sequence[int] | None = None) -> dict[str, Any]:
        described = dict(self.description)
        if consumed is not None:
            described["sources"] = [dict(e, consumed=int(c)) for e, c in zip(described["sources"], consumed,
                                                                             strict=True)]
        return {**described, "plan": plan_to_state(self.plan, offsets, self.source.digest)}


def resume_epoch(spec: MixSpec, params: PlanParams, state: Any, apply: str = "next_epoch") -> ResumedEpoch:
    """:func:`resume_mixture` with what saving the resumed epoch's states needs (MX8, MX12)."""
    if apply not in APPLY:
        raise PlanError(f"apply: expected one of {APPLY}, got {apply!r}")
    epoch = state.get("epoch") if isinstance(state, dict) else None
    if epoch is not None and params.epoch != epoch:
        raise StateError(f"mixture state is for epoch {epoch}, the plan asked for epoch {params.epoch}")
    source = epoch_source(spec, state)
    validate_state(state["plan"], source.digest)
    description = {k: v for k, v in state.items() if k != "plan"}
    if apply == "now":
        weights = dict(zip(spec.names, spec.weights(epoch or 0), strict=True))
        source = remix(source, state, spec, weights, spec.composition)
        description = remix_description(source, state, weights, spec.composition)
        plan = source.plan(params)
    else:
        plan = source.plan(params, state["plan"])
    return ResumedEpoch(plan, later_spec(spec, int(state["epoch"]), source), source, description)


def epoch_source(spec: MixSpec, state: Any) -> EpochSource:
    """What the state's epoch is planned from, over ``spec``'s sources (MX7 checks included)."""
    check_state(state)
    if "remix" in state:
        base = state["remix"]["base"]
        old = epoch_source(spec, base)
        validate_state(base["plan"], old.digest)
        return remix(old, base, spec, state["remix"]["weights"], state["composition"])
    return spec_source(saved_spec(spec, state), int(state["epoch"]))


def spec_source(spec: MixSpec, epoch: int) -> EpochSource:
    """``epoch`` of ``spec`` as an :class:`EpochSource` (what a loader plans an epoch from)."""
    return EpochSource(spec.sources, functools.partial(_base, spec), spec.digest(epoch),
                       tuple(int(c) for c in spec.cursors(epoch)), tuple(int(c) for c in spec.counts(epoch)))


def restore_mixture(spec: MixSpec, state: Any) -> tuple[MixSpec, MixSpec]:
    """``(saved, later)``: the mixture the state's epoch was planned with (over ``spec``'s
    sources' shards) and ``spec`` rebased so every source continues after that epoch (MX8).

    Checks the whole state (MX7), its plan part against the epoch digest included.
    """
    check_state(state)
    epoch = int(state["epoch"])
    saved = saved_spec(spec, state)
    validate_state(state["plan"], saved.digest(epoch))
    return saved, spec_after(spec, state)


def spec_after(spec: MixSpec, state: dict[str, Any]) -> MixSpec:
    """``spec`` rebased so every source continues after the state's epoch (a new one at 0)."""
    after = {s["name"]: int(s["cursor"]) + int(s["count"]) for s in state["sources"]}
    return spec.rebased(int(state["epoch"]) + 1, [after.get(source.name, 0) for source in spec.sources])


def saved_spec(spec: MixSpec, state: dict[str, Any]) -> MixSpec:
    """The mixture the state's epoch was planned with, over ``spec``'s sources' shards."""
    by_name = {source.name: source for source in spec.sources}
    sources, cursors = [], []
    for i, entry in enumerate(state["sources"]):
        where = f"state.sources[{i}] ({entry['name']!r})"
        current = by_name.get(entry["name"])
        if current is None:
            raise StateError(f"{where}: the source is not in the mixture, but the saved epoch still reads it; "
                             f"keep it with weight 0 until that epoch ends")
        if entry["fingerprint"] != current.fingerprint or entry["num_samples"] != current.num_samples:
            raise StateError(f"{where}: source changed since the state was saved: fingerprint "
                             f"{entry['fingerprint']!r} / {entry['num_samples']} samples, now "
                             f"{current.fingerprint!r} / {current.num_samples}")
        tokens = entry.get("num_tokens")
        if tokens is not None and tokens != current.num_tokens:
            raise StateError(f"{where}: source changed since the state was saved: {tokens} tokens, now "
                             f"{current.num_tokens}")
        if entry.get(WEIGHTS_KEY) != current.weights_fingerprint:
            raise StateError(f"{where}: the source's sample weights changed since the state was saved: weights "
                             f"fingerprint {entry.get(WEIGHTS_KEY)!r}, now {current.weights_fingerprint!r}"
                             + (f" ({current.sample_weights.where})" if current.sample_weights is not None else "")
                             + "; resume with the weights the epoch was planned with")
        sources.append(MixSource(current.name, current.shard_sizes, entry["weight"], current.fingerprint, tokens,
                                 current.sample_weights))
        cursors.append(entry["cursor"])
    epoch = state["epoch"]
    schedule = tuple(ScheduleStep(epoch, tuple(g["weights"]), g["first_sample"]) for g in state.get("segments", []))
    try:
        saved = MixSpec(tuple(sources), state["samples_per_epoch"], state["composition"], schedule,
                        unit=state.get("unit", "samples"))
    except PlanError as error:
        raise StateError(f"state: {error}") from error
    saved = saved.rebased(state["epoch"], cursors)
    counts = [int(c) for c in saved.counts(state["epoch"])]
    if counts != [entry["count"] for entry in state["sources"]]:
        raise StateError(f"state.sources: counts {[e['count'] for e in state['sources']]} do not follow from "
                         f"the saved weights and samples_per_epoch (expected {counts})")
    return saved
