"""A new mix for the rest of a started epoch: specs/mixture.md MX12 as properties."""

from __future__ import annotations

import collections
import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError
from shardkit.plan import Plan, PlanParams
from shardkit.plan.mixture.prefix import Interleave
from shardkit.plan.mixture.remainder import Remainder, UntakenStream
from shardkit.plan.mixture.sequence import MixedSequence, SourceStream
from shardkit.plan.mixture.spec import MixSource, MixSpec, largest_remainder
from shardkit.plan.mixture.state import mixture_plan, mixture_to_state, resume_epoch
from shardkit.plan.sequence import Slice
from tests.helpers import mixture_strategies as ms
from tests.helpers.plan_strategies import all_samples, assert_equal_steps, kill_offsets

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    restored: dict[str, Any] = json.loads(json.dumps(state))
    return restored


def rest_of(plan: Plan) -> list[int]:
    """Real samples the plan's consumers deliver from their start offsets, plus its dropped tail."""
    found = [int(i) for c, out in enumerate(all_samples(plan))
             for i in out.ids[plan.start_offsets[c]:][~out.padded[plan.start_offsets[c]:]]]
    return found + ms.dropped_ids(plan)


def stream(spec: MixSpec, index: int, params: PlanParams, lo: int, hi: int) -> collections.Counter[int]:
    """Global ids (in ``spec``'s numbering) at stream positions ``lo:hi`` of source ``index``."""
    ids = ms.pass_ids(spec, index, params)
    return collections.Counter(ids[np.arange(lo, hi) % len(ids)].tolist()) if hi > lo else collections.Counter()


@st.composite
def remixes(draw: st.DrawFn, /) -> tuple[MixSpec, MixSpec, PlanParams, PlanParams, int]:
    """A spec (maybe segmented), new weights plus maybe an added source, two params."""
    spec = draw(ms.mix_specs(max_epoch_samples=200, max_changes=1))
    weights = [0.0 if s.num_samples == 0 else draw(st.sampled_from([0.0, 0.01, 0.5, 3.0])) for s in spec.sources]
    changed = ms.with_weights(replace(spec, schedule=()), weights if any(weights) else [s.weight for s in spec.sources])
    if draw(st.booleans()):
        sizes = np.array(draw(st.lists(st.integers(1, 30), min_size=1, max_size=3)))
        changed = replace(changed, sources=changed.sources + (MixSource("added", sizes, 1.0, "fp-added"),))
    changed = replace(changed, composition=draw(st.sampled_from(["random", "stratified"])))
    first = draw(ms.mix_params())
    params = draw(ms.mix_params(epoch=first.epoch, seed=first.seed, shuffle=first.shuffle))
    return spec, changed, first, params, draw(st.integers(0, 2**32 - 1))


@PROPERTY
@given(remixes())
def test_a_new_mix_now_keeps_the_consumed_and_replans_the_rest_exactly(
        case: tuple[MixSpec, MixSpec, PlanParams, PlanParams, int]) -> None:
    """MX12: consumed stays consumed; the remainder's M samples are re-planned with exact new
    counts largest_remainder(M, w'); per source, what the epoch takes is inside its stream
    range cursor..cursor+count (no sample repeats before its pass ends), and the next epoch
    starts right after it; equal steps under the (maybe elastic) new params."""
    spec, changed, first, params, seed = case
    plan = mixture_plan(spec, first)
    offsets = kill_offsets(plan, seed)
    consumed = ms.delivered(plan, offsets)
    state = roundtrip(mixture_to_state(spec, plan, offsets))
    resumed = resume_epoch(changed, params, state, apply="now")
    remaining = spec.samples_per_epoch - len(consumed)
    assert resumed.plan.num_source_samples == remaining and resumed.plan.level == 0
    assert_equal_steps(resumed.plan, remaining)
    names = [s.name for s in resumed.source.sources]
    weights = dict(zip(changed.names, changed.weights(first.epoch), strict=True))
    want = largest_remainder(remaining, [weights.get(n, 0.0) for n in names]) if remaining else [0] * len(names)
    rest = rest_of(resumed.plan)
    # ids are numbered in the epoch's source order (the saved sources, then added ones)
    epoch_spec = replace(changed, sources=resumed.source.sources, schedule=())
    got = np.bincount(ms.source_of(epoch_spec, rest), minlength=len(names)) if rest else np.zeros(len(names))
    assert got.tolist() == list(want)
    state_next = resumed.to_state([0] * resumed.plan.num_consumers)
    for i, entry in enumerate(state_next["sources"]):
        taken = collections.Counter(x for x in consumed + rest if ms.source_of(epoch_spec, [x])[0] == i)
        allowed = stream(epoch_spec, i, first, entry["cursor"], entry["cursor"] + entry["count"])
        assert not taken - allowed, f"{entry['name']}: a sample taken twice within one pass"
    later = {s.name: c for s, c in zip(resumed.later.sources, resumed.later.cursors(first.epoch + 1), strict=True)}
    assert all(later[e["name"]] == e["cursor"] + e["count"] for e in state_next["sources"] if e["name"] in later)


@PROPERTY
@given(remixes(), st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2), st.data())
def test_a_remixed_epoch_resumes_exactly_and_elastically_and_remixes_again(
        case: tuple[MixSpec, MixSpec, PlanParams, PlanParams, int], seeds: list[int], data: st.DataObject) -> None:
    """MX12 with MX5: a state saved from the remixed rest (JSON round trip) resumes it on the
    same or another topology, or remixes it again; the remixed rest is ms.delivered exactly."""
    spec, changed, first, params, seed = case
    plan = mixture_plan(spec, first)
    state = roundtrip(mixture_to_state(spec, plan, kill_offsets(plan, seed)))
    resumed = resume_epoch(changed, params, state, apply="now")
    expected = collections.Counter(rest_of(resumed.plan))
    offsets = kill_offsets(resumed.plan, seeds[0])
    consumed = ms.delivered(resumed.plan, offsets)
    saved = roundtrip(resumed.to_state(offsets))
    assert saved["version"] == 2 and saved["remix"]["base"] == state
    again = data.draw(ms.mix_params(epoch=first.epoch, seed=first.seed, shuffle=first.shuffle))
    second = resume_epoch(changed, again, saved)
    assert collections.Counter(consumed + rest_of(second.plan)) == expected
    even = ms.with_weights(changed, [1.0 if s.num_samples else 0.0 for s in changed.sources])
    third = resume_epoch(even, again, saved, apply="now")
    assert third.plan.num_source_samples == sum(expected.values()) - len(consumed)


def test_apply_is_checked() -> None:
    spec = MixSpec((MixSource("a", np.array([5]), 1.0, "f"),), 10)
    plan = mixture_plan(spec, PlanParams(batch_size=2))
    with pytest.raises(PlanError, match="apply"):
        resume_epoch(spec, PlanParams(batch_size=2), mixture_to_state(spec, plan, [2]), apply="later")



def explicit_untaken(plan: Plan, offsets: list[int], sources: tuple[MixSource, ...]) -> list[list[list[int]]]:
    """Reference for U_i: every id of the plan's remainder listed window by window (what MX12
    did before the lazy remainder, O(remaining samples)), per consumer slice then the dropped
    tail, split by source: ``found[i][c]``."""
    ends = [plan.num_samples(c) for c in range(plan.num_consumers)]
    tail = plan.remainder(ends)
    pieces = [Slice(rest, 0, len(rest) - len(tail))
              for rest in (plan.remainder(ends[:c] + [o] + ends[c + 1:]) for c, o in enumerate(offsets))]
    found: list[list[list[int]]] = [[] for _ in sources]
    spec = MixSpec(sources, 0)
    for piece in [*pieces, tail]:
        ids = ms.sequence_ids(plan, piece)
        owner = ms.source_of(spec, ids) if ids else np.zeros(0, dtype=np.int64)
        for i in range(len(sources)):
            found[i].append([x for x, o in zip(ids, owner, strict=True) if o == i])
    return found


@PROPERTY
@given(remixes(), st.integers(0, 3), st.lists(st.integers(0, 2**32 - 1), min_size=3, max_size=3), st.data())
def test_the_lazy_remainder_holds_each_sources_untaken_samples_in_remainder_order(
        case: tuple[MixSpec, MixSpec, PlanParams, PlanParams, int], how: int, seeds: list[int],
        data: st.DataObject) -> None:
    """MX12: U_i, built from per-range counts without listing ids, holds exactly the remainder's
    samples of source i, consumer slice after consumer slice then the dropped tail (each slice
    in stream order), for a level-0, a remixed, an elastic and a remixed-then-elastic plan; any
    rank range of it reads the same samples as the whole."""
    spec, changed, first, params, seed = case
    plan, sources = mixture_plan(spec, first), spec.sources
    offsets = kill_offsets(plan, seed)
    if how:
        resumed = resume_epoch(changed, params, roundtrip(mixture_to_state(spec, plan, offsets)),
                               apply="now" if how != 2 else "next_epoch")
        plan, sources = resumed.plan, resumed.source.sources
        offsets = kill_offsets(plan, seeds[0])
        if how == 3:
            again = resume_epoch(changed, first, roundtrip(resumed.to_state(offsets)))  # elastic over the remix
            plan, offsets = again.plan, kill_offsets(again.plan, seeds[1])
    want = explicit_untaken(plan, offsets, sources)
    remainder = Remainder(plan.remainder(offsets), len(sources))
    assert remainder.totals.tolist() == [sum(len(p) for p in per) for per in want]
    sizes = plan.shard_offsets
    rest = SourceStream(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 0, 0)
    for i, per_slice in enumerate(want):
        untaken = UntakenStream(remainder, i, rest)
        ids = [int(sizes[s.shard_index]) + k for s in untaken.spans(0, len(untaken)) for k in range(s.start, s.end)]
        at = 0
        for piece in per_slice:
            assert sorted(ids[at:at + len(piece)]) == sorted(piece)
            at += len(piece)
        lo = data.draw(st.integers(0, len(ids)))
        hi = data.draw(st.integers(lo, len(ids)))
        spans = untaken.spans(lo, hi)
        assert [int(sizes[s.shard_index]) + k for s in spans for k in range(s.start, s.end)] == ids[lo:hi]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 40), st.integers(0, 10**6)), min_size=1, max_size=7), st.data())
def test_vectorised_interleave_prefixes_equal_the_bisected_ones(counts: list[int], data: st.DataObject) -> None:
    """MX3 / MX12: Interleave.prefixes (estimate then exact key steps) equals prefix at every position."""
    mix = Interleave(counts)
    positions = data.draw(st.lists(st.integers(0, mix.total), max_size=40)) + [0, mix.total]
    assert mix.prefixes(np.array(positions)).tolist() == [mix.prefix(p) for p in positions]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 40), st.integers(0, 300_000), st.just(10**9)), min_size=1, max_size=80),
       st.data())
def test_prefix_by_vector_search_equals_the_exact_bisection(counts: list[int], data: st.DataObject) -> None:
    """MX3: Interleave.prefix (a 65-way int64 search of the threshold, from a bracket around
    p L / T) equals prefix_exact (Python ints, bisected) at any position, many sources and
    counts past int64 keys (which take the exact path) included."""
    mix = Interleave(counts)
    positions = data.draw(st.lists(st.integers(0, mix.total), max_size=20)) + [1, mix.total - 1]
    for p in positions:
        if 0 < p < mix.total:
            assert mix.prefix(p) == mix.prefix_exact(p)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=5).filter(lambda q: sum(q) > 1),
       st.sampled_from(["random", "stratified"]), st.integers(2, 2500), st.integers(1, 64), st.data())
def test_cut_windows_are_counted_as_their_listed_order_counts_them(
        counts: list[int], composition: str, window: int, batch: int, data: st.DataObject) -> None:
    """MX12 cut rule: the samples of each source among outputs lo:hi of a cut window, counted
    without ordering it (random: from its Philox stream, mixture_cuts.py), equal those of the
    window's listed order (window_ranks: the slow reference), for cuts in many windows at once,
    the last (shorter) window included."""
    streams = [SourceStream(np.array([max(q, 1)]), np.zeros(1, dtype=np.int64), i, 0) for i, q in enumerate(counts)]
    sequence = MixedSequence(streams, counts, composition, window, batch, (data.draw(st.integers(0, 99)), 3))
    win, total = sequence.window, len(sequence)
    windows = sorted(data.draw(st.sets(st.integers(0, (total - 1) // win), min_size=1, max_size=20)))
    lo, hi = [], []
    for j in windows:
        size = min(win, total - j * win)
        a = data.draw(st.integers(0, size - 1))
        lo.append(j * win + a)
        hi.append(j * win + data.draw(st.integers(a + 1, size)))
    edges = sequence.prefixes(np.array([j * win for j in windows] + [min((j + 1) * win, total) for j in windows]))
    found = sequence.cut_counts(np.array(lo), np.array(hi), (edges[:len(windows)], edges[len(windows):]))
    for j, a, b, counted in zip(windows, lo, hi, found.tolist(), strict=True):
        listed = sequence.window_ranks(j)[0][a - j * win:b - j * win]
        assert counted == np.bincount(listed, minlength=len(counts)).tolist()
