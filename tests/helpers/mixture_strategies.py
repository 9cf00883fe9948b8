"""Hypothesis strategies and materialising references for the mixture plan tests.

The references rebuild an epoch's multiset per source straight from specs/mixture.md (stream
position ``s`` of source ``i`` is the ``s mod N_i``-th sample of its fixed shard order),
independently of ``MixedSequence``.
"""

from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from shardkit.plan import Plan, PlanParams, shard_offsets
from shardkit.plan.mixture.sequence import source_order
from shardkit.plan.mixture.spec import MixSource, MixSpec, ScheduleStep
from shardkit.plan.mixture.state import mixture_shard_sizes, shard_bases
from tests.helpers.plan_strategies import consumer_samples, drawn_params

NAMES = ("web", "code", "books", "math", "wiki", "news")


@st.composite
def mix_specs(draw: st.DrawFn, /, max_epoch_samples: int = 600, max_changes: int = 0) -> MixSpec:
    """1-5 sources (some smaller than a batch, some empty with weight 0), weights from tiny to
    large, epochs of 0..max samples, both compositions; up to ``max_changes`` weight changes
    inside epochs 0-3 (MX11)."""
    count = draw(st.integers(1, 5))
    sources = []
    for name in NAMES[:count]:
        sizes = draw(st.lists(st.integers(0, 40), min_size=1, max_size=6))
        weight = draw(st.sampled_from([0.0, 1e-3, 0.05, 0.3, 1.0, 7.0]))
        if sum(sizes) == 0:
            weight = 0.0
        sources.append(MixSource(name, np.array(sizes), weight, f"fp-{name}"))
    if all(s.weight == 0 for s in sources):
        sizes = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4))
        sources[0] = MixSource(sources[0].name, np.array(sizes), 1.0, sources[0].fingerprint)
    composition = draw(st.sampled_from(["random", "stratified"]))
    total = draw(st.integers(0, max_epoch_samples))
    changes = {}
    for _ in range(draw(st.integers(0, max_changes)) if total > 1 else 0):
        weights = [0.0 if s.num_samples == 0 else draw(st.sampled_from([0.0, 1e-3, 0.5, 3.0])) for s in sources]
        if any(weights):
            changes[(draw(st.integers(0, 3)), draw(st.integers(1, total - 1)))] = tuple(weights)
    schedule = tuple(ScheduleStep(epoch, weights, sample) for (epoch, sample), weights in changes.items())
    return MixSpec(tuple(sources), total, composition, schedule)


@st.composite
def mix_params(draw: st.DrawFn, /, **fixed: object) -> PlanParams:
    return drawn_params(draw, (2**20, 3, 5, 3, 9), draw(st.sampled_from([1, 5, 16, 64, 8192])), fixed)


def pass_ids(spec: MixSpec, index: int, params: PlanParams) -> np.ndarray:
    """Global sample ids of one pass of source ``index``, in its fixed shard order."""
    source = spec.sources[index]
    local = shard_offsets(source.shard_sizes)
    base = int(shard_offsets(mixture_shard_sizes(spec))[shard_bases(spec)[index]])
    runs = [np.arange(local[s], local[s + 1]) for s in source_order(source, params.seed, params.shuffle)]
    return np.concatenate(runs + [np.zeros(0, dtype=np.int64)]).astype(np.int64) + base


def expected_multiset(spec: MixSpec, params: PlanParams) -> collections.Counter[int]:
    """The epoch's multiset per the spec: each source's stream range cursor..cursor+count."""
    found: collections.Counter[int] = collections.Counter()
    for i, (count, cursor) in enumerate(zip(spec.counts(params.epoch), spec.cursors(params.epoch), strict=True)):
        if count:
            ids = pass_ids(spec, i, params)
            found.update(ids[np.arange(cursor, cursor + count) % len(ids)].tolist())
    return found


def sequence_ids(plan: Plan, sequence: object) -> list[int]:
    """Global ids a plan-level SampleSequence outputs, in order."""
    offsets = plan.shard_offsets
    return [int(i) for w in sequence.windows(0, len(sequence)) for i in w.global_indices(offsets)]  # type: ignore[attr-defined]


def dropped_ids(plan: Plan) -> list[int]:
    """The plan's dropped tail (what no consumer yields), from its remainder after the end."""
    everything = [plan.num_samples(c) for c in range(plan.num_consumers)]
    return sequence_ids(plan, plan.remainder(everything))


def delivered(plan: Plan, offsets: list[int]) -> list[int]:
    """Real samples consumers delivered between start_offsets and ``offsets``."""
    found: list[int] = []
    for consumer, offset in enumerate(offsets):
        start = plan.start_offsets[consumer]
        out = consumer_samples(plan, consumer, start)
        part = slice(0, offset - start)
        found.extend(out.ids[part][~out.padded[part]].tolist())
    return found


def source_of(spec: MixSpec, ids: list[int]) -> np.ndarray:
    """Source index of each global sample id."""
    starts = [int(shard_offsets(mixture_shard_sizes(spec))[b]) for b in shard_bases(spec)]
    return np.searchsorted(np.array(starts), np.array(ids, dtype=np.int64), side="right") - 1


def with_weights(spec: MixSpec, weights: list[float]) -> MixSpec:
    sources = tuple(replace(s, weight=w) for s, w in zip(spec.sources, weights, strict=True))
    return replace(spec, sources=sources)
