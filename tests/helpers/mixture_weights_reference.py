"""Weighted mixture sources for the plan tests: strategies and a materialising reference (MX17).

The reference expands a weighted source's stream straight from specs/mixture.md MX17: pass ``p``
lists the shards in the source's fixed order, each sample ``j`` repeated ``m_j`` times with
``m_j = floor(U_p + X_j L / X_N) - floor(U_p + X_{j-1} L / X_N)`` (the running sums ``X`` of
``SampleWeights``, ``U_p`` the pass's offset), copy ``k M + r`` for the ``r``-th copy in the
``k``-th pass of the epoch - independently of ``WeightedStream`` and ``WeightedSequence``; an
unweighted source's stream position ``s`` is copy ``(s - P) // N`` (``P`` its epoch cursor, MX2).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from shardkit.plan import Plan, PlanParams, shard_offsets
from shardkit.plan.mixture.sequence import source_order
from shardkit.plan.mixture.spec import MixSource, MixSpec
from shardkit.plan.mixture.state import (
    mixture_plan,
    mixture_shard_sizes,
    mixture_to_state,
    resume_epoch,
    resume_mixture,
    shard_bases,
)
from shardkit.plan.mixture.weights import copy_stride, pass_length, pass_offset
from shardkit.plan.sample_weights import SampleWeights
from shardkit.plan.sequence import SampleSequence
from tests.helpers import mixture_strategies as ms
from tests.helpers.plan_strategies import kill_offsets

Element = tuple[int, int]  # (global sample id, copy number)


@st.composite
def weighted_specs(draw: st.DrawFn, /, max_epoch_samples: int = 400, max_changes: int = 0) -> MixSpec:
    """:func:`ms.mix_specs` with some non-empty sources given per-sample weights (zeros, ties,
    a few heavy samples; sometimes all equal)."""
    spec = draw(ms.mix_specs(max_epoch_samples=max_epoch_samples, max_changes=max_changes))
    sources = []
    for source in spec.sources:
        if source.num_samples and draw(st.booleans()):
            kind = draw(st.sampled_from(["mixed", "mixed", "equal", "filter"]))
            values = {"mixed": [0.0, 0.1, 0.5, 1.0, 2.0, 9.0], "equal": [1.0], "filter": [0.0, 1.0]}[kind]
            weights = draw(st.lists(st.sampled_from(values), min_size=source.num_samples,
                                    max_size=source.num_samples))
            if not any(weights):
                weights[draw(st.integers(0, source.num_samples - 1))] = 1.0
            source = replace(source, sample_weights=SampleWeights(weights, source.shard_sizes, f"w-{source.name}"))
        sources.append(source)
    return replace(spec, sources=tuple(sources))


def pass_elements(source: MixSource, base: int, params: PlanParams, pass_index: int) -> list[tuple[int, int]]:
    """One weighted pass of ``source``: ``(global id, copy within the pass)`` in pass order."""
    weights = source.sample_weights
    assert weights is not None
    length, total, offset = pass_length(weights), weights.total, pass_offset(params.seed, source.name, pass_index)
    scale = length / total
    local = shard_offsets(source.shard_sizes)
    found = []
    for shard in source_order(source, params.seed, params.shuffle).tolist():
        running = weights.cumulative(shard)
        before = float(weights.prefix[shard])
        for j, x in zip(range(int(local[shard]), int(local[shard + 1])), running.tolist(), strict=True):
            low = length if before >= total else min(int(np.floor(offset + before * scale)), length)
            high = length if x >= total else min(int(np.floor(offset + x * scale)), length)
            found.extend((base + j, r) for r in range(high - low))
            before = x
    if len(found) != length:
        raise AssertionError(f"{source.name}: pass {pass_index} holds {len(found)} elements, not {length}")
    return found


def stream_elements(spec: MixSpec, index: int, params: PlanParams, lo: int, hi: int,
                    epoch_cursor: int) -> list[Element]:
    """Stream positions ``lo:hi`` of source ``index`` as elements (copies counted from the pass
    of ``epoch_cursor``); an unweighted source's position ``s`` is ``(id, (s - epoch_cursor) // N)``
    (the times the epoch took the sample before, MX2)."""
    source = spec.sources[index]
    base = int(shard_offsets(mixture_shard_sizes(spec))[shard_bases(spec)[index]])
    if source.sample_weights is None:
        ids = ms.pass_ids(spec, index, params)
        return [(int(ids[s % len(ids)]), (s - epoch_cursor) // len(ids)) for s in range(lo, hi)]
    length, stride = pass_length(source.sample_weights), copy_stride(source.sample_weights)
    found: list[Element] = []
    passes: dict[int, list[tuple[int, int]]] = {}
    for s in range(lo, hi):
        p, inner = divmod(s, length)
        if p not in passes:
            passes[p] = pass_elements(source, base, params, p)
        sample, r = passes[p][inner]
        found.append((sample, (p - epoch_cursor // length) * stride + r))
    return found


def expected_elements(spec: MixSpec, params: PlanParams) -> collections.Counter[Element]:
    """The epoch's multiset of elements per MX17: each source's stream range cursor..cursor+count."""
    found: collections.Counter[Element] = collections.Counter()
    for i, (count, cursor) in enumerate(zip(spec.counts(params.epoch), spec.cursors(params.epoch), strict=True)):
        found.update(stream_elements(spec, i, params, int(cursor), int(cursor + count), int(cursor)))
    return found


def window_elements(plan: Plan, windows: object) -> tuple[list[Element], np.ndarray]:
    """Elements and pad flags of ``windows`` (an iterable of plan windows), in output order."""
    elements: list[Element] = []
    padded: list[np.ndarray] = [np.zeros(0, dtype=bool)]
    for window in windows:  # type: ignore[attr-defined]
        ids = window.global_indices(plan.shard_offsets).tolist()
        copies = [0] * len(ids) if window.copies is None else window.copies.tolist()
        elements.extend(zip(ids, copies, strict=True))
        padded.append(window.padded_mask())
    return elements, np.concatenate(padded)


def consumer_elements(plan: Plan, consumer: int, start: int = 0) -> tuple[list[Element], np.ndarray]:
    return window_elements(plan, plan.consumer_windows(consumer, start))


def delivered(plan: Plan, offsets: list[int]) -> list[Element]:
    """Real elements consumers delivered between start_offsets and ``offsets``."""
    found: list[Element] = []
    for consumer, offset in enumerate(offsets):
        elements, padded = consumer_elements(plan, consumer, plan.start_offsets[consumer])
        found.extend(e for e, p in zip(elements[:offset - plan.start_offsets[consumer]], padded, strict=False) if not p)
    return found


def rest_and_dropped(plan: Plan) -> list[Element]:
    """Real elements every consumer of ``plan`` yields from its start offset, and its dropped tail."""
    found: list[Element] = []
    for consumer in range(plan.num_consumers):
        elements, padded = consumer_elements(plan, consumer, plan.start_offsets[consumer])
        found.extend(e for e, p in zip(elements, padded, strict=True) if not p)
    tail: SampleSequence = plan.remainder([plan.num_samples(c) for c in range(plan.num_consumers)])
    found.extend(window_elements(plan, tail.windows(0, len(tail)))[0])
    return found


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` through JSON, as a checkpoint stores it (and unchanged by it)."""
    restored: dict[str, Any] = json.loads(json.dumps(state))
    assert restored == state
    return restored


@st.composite
def resume_chains(draw: st.DrawFn, /, specs: Callable[[], st.SearchStrategy[MixSpec]]
                  ) -> tuple[MixSpec, list[PlanParams], list[int]]:
    """A mixture from ``specs()``, the topologies of 2-4 plan levels (each the one before or an
    elastic change: ranks, workers, batch size, tail, window) and one kill seed per resume."""
    spec = draw(specs())
    first = draw(ms.mix_params())
    chain = [first]
    for _ in range(draw(st.integers(1, 3))):
        chain.append(chain[-1] if draw(st.booleans()) else draw(ms.mix_params(epoch=first.epoch)))
    seeds = draw(st.lists(st.integers(0, 2**32 - 1), min_size=len(chain) - 1, max_size=len(chain) - 1))
    return spec, chain, seeds


def elements_over_chain(case: tuple[MixSpec, list[PlanParams], list[int]]) -> collections.Counter[Element]:
    """What a chain of kills and resumes delivers at every level, plus the last plan's rest and
    dropped tail: the epoch's multiset of elements when nothing is lost or repeated."""
    spec, chain, seeds = case
    plan = mixture_plan(spec, chain[0])
    consumed: list[Element] = []
    for params, seed in zip(chain[1:], seeds, strict=True):
        offsets = kill_offsets(plan, seed)
        consumed.extend(delivered(plan, offsets))
        plan, _ = resume_mixture(spec, params, roundtrip(mixture_to_state(spec, plan, offsets)))
    return collections.Counter(consumed + rest_and_dropped(plan))


def new_mix_now(spec: MixSpec, data: st.DataObject, choices: list[float]
                ) -> tuple[PlanParams, collections.Counter[Element], dict[str, Any]]:
    """A plan of ``spec`` killed at drawn offsets and resumed with drawn new weights (from
    ``choices``) applied *now* (MX12) on a drawn topology: its first params, the elements
    delivered before the kill plus the new plan's rest and dropped tail, and the new state."""
    weights = [0.0 if s.num_samples == 0 else data.draw(st.sampled_from(choices)) for s in spec.sources]
    changed = ms.with_weights(spec, weights if any(weights) else [s.weight for s in spec.sources])
    first = data.draw(ms.mix_params(tail="pad"))
    params = data.draw(ms.mix_params(epoch=first.epoch, tail="pad", seed=first.seed, shuffle=first.shuffle))
    plan = mixture_plan(spec, first)
    offsets = kill_offsets(plan, data.draw(st.integers(0, 2**32 - 1)))
    consumed = delivered(plan, offsets)
    resumed = resume_epoch(changed, params, roundtrip(mixture_to_state(spec, plan, offsets)), apply="now")
    state = resumed.to_state(list(resumed.plan.start_offsets))
    return first, collections.Counter(consumed + rest_and_dropped(resumed.plan)), state
