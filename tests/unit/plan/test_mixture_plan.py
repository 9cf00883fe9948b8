"""Mixture plans: specs/mixture.md MX1-MX4 as properties over sources, weights and shapes."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError
from shardkit.plan import PlanParams
from shardkit.plan.mixture.prefix import Interleave
from shardkit.plan.mixture.spec import MixSource, MixSpec, ScheduleStep, largest_remainder
from shardkit.plan.mixture.state import mixed_sequence, mixture_plan
from tests.helpers import mixture_strategies as ms
from tests.helpers.plan_strategies import all_samples, assert_equal_steps

PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.integers(0, 10**12), st.lists(st.floats(0, 1e6), min_size=1, max_size=16))
def test_largest_remainder_sums_exactly_and_stays_within_one(total: int, weights: list[float]) -> None:
    """MX1: counts sum to the epoch size, each within 1 of its exact quota."""
    if sum(weights) == 0:
        with pytest.raises(PlanError, match="positive sum"):
            largest_remainder(total, weights)
        return
    counts = largest_remainder(total, weights)
    assert int(counts.sum()) == total
    whole = sum(weights)
    for count, weight in zip(counts.tolist(), weights, strict=True):
        assert abs(count - total * weight / whole) < 1 + 1e-6 * total


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=7), st.data())
def test_interleave_prefixes_are_monotone_exact_and_close_to_the_ideal(counts: list[int], data: st.DataObject) -> None:
    """MX3: prefix(p) sums to p, grows by one source per position, ends at the counts and
    stays within (n + 1) / 2 of p * q_i / T."""
    mix = Interleave(counts)
    total = sum(counts)
    previous = [0] * len(counts)
    for p in range(1, total + 1):
        now = mix.prefix(p)
        steps = [b - a for a, b in zip(previous, now, strict=True)]
        assert sorted(steps)[-1] == 1 and sum(steps) == 1
        for i, q in enumerate(counts):
            assert abs(now[i] - p * q / total) <= (len(counts) + 1) / 2
        previous = now
    assert previous == counts
    lo = data.draw(st.integers(0, total))
    hi = data.draw(st.integers(lo, total))
    merged = mix.merged(mix.prefix(lo), mix.prefix(hi))
    source = np.repeat(np.arange(len(counts)), np.array(mix.prefix(hi)) - np.array(mix.prefix(lo)))[merged]
    walked = [mix.prefix(p + 1) for p in range(lo, hi)]
    before = [mix.prefix(p) for p in range(lo, hi)]
    assert source.tolist() == [int(np.argmax(np.array(b) - np.array(a))) for a, b in zip(before, walked, strict=True)]


@PROPERTY
@given(ms.mix_specs(), st.data())
def test_epoch_is_the_exact_multiset_delivered_exactly_once(spec: MixSpec, data: st.DataObject) -> None:
    """MX1/MX2 with P1-P4: consumers' real samples plus the dropped tail are exactly the
    epoch's multiset (source i: its count, stream range cursor..cursor+count); equal steps."""
    params = data.draw(ms.mix_params())
    plan = mixture_plan(spec, params)
    assert plan.num_source_samples == spec.samples_per_epoch
    assert_equal_steps(plan, spec.samples_per_epoch)
    outputs = all_samples(plan)
    real = [int(i) for out in outputs for i in out.ids[~out.padded]]
    got = collections.Counter(real + ms.dropped_ids(plan))
    assert got == ms.expected_multiset(spec, params)
    assert len(ms.dropped_ids(plan)) == plan.num_dropped
    per_source = collections.Counter(ms.source_of(spec, list(got.elements())).tolist())
    assert [per_source.get(i, 0) for i in range(len(spec.sources))] == spec.counts(params.epoch).tolist()
    pads = [int(i) for out in outputs for i in out.ids[out.padded]]
    assert len(pads) == plan.num_padded and set(pads) <= set(got)


@PROPERTY
@given(ms.mix_specs(max_epoch_samples=300), ms.mix_params(epoch=0), st.integers(1, 6))
def test_a_source_repeats_only_whole_passes(spec: MixSpec, params: PlanParams, num_epochs: int) -> None:
    """MX2: within an epoch each sample of source i appears floor(k) or ceil(k) times
    (k = count / N); over epochs 0..e, counts never differ by more than one (every sample is
    seen once before any is seen twice)."""
    seen: list[collections.Counter[int]] = [collections.Counter() for _ in spec.sources]
    for epoch in range(num_epochs):
        epoch_params = PlanParams(**(params.to_dict() | {"epoch": epoch}))
        multiset = ms.expected_multiset(spec, epoch_params)
        sources = ms.source_of(spec, list(multiset))
        for i, count in enumerate(spec.counts(epoch).tolist()):
            ids = ms.pass_ids(spec, i, epoch_params).tolist()
            if not ids:
                continue
            times = [multiset.get(x, 0) for x in ids]
            assert min(times) >= count // len(ids) and max(times) <= -(-count // len(ids))
            seen[i].update({x: multiset[x] for x, s in zip(multiset, sources, strict=True) if s == i})
            totals = [seen[i].get(x, 0) for x in ids]
            assert max(totals) - min(totals) <= 1


@PROPERTY
@given(ms.mix_specs(), ms.mix_params(tail="drop"))
def test_stratified_batches_hold_the_interleave_counts(spec: MixSpec, params: PlanParams) -> None:
    """MX4: with stratified composition each level-0 batch holds, per source, exactly the
    counts of its B positions of the merged order; random keeps the window's multiset."""
    plan = mixture_plan(spec, params)
    sequence = mixed_sequence(spec, params)
    batch = params.batch_size
    for consumer, out in enumerate(all_samples(plan)):
        start = plan._partition.start(consumer)  # noqa: SLF001 - the consumer's epoch position
        for b in range(len(out.ids) // batch):
            lo = start + b * batch
            if lo + batch > plan.num_source_samples or spec.composition != "stratified":
                continue
            want = np.array(sequence.prefix(lo + batch)) - np.array(sequence.prefix(lo))
            got = np.bincount(ms.source_of(spec, out.ids[b * batch:(b + 1) * batch].tolist()),
                              minlength=len(spec.sources))
            assert got.tolist() == want.tolist()


def test_mixture_plans_are_deterministic_and_epochs_differ() -> None:
    """P5/P6 for mixtures: equal inputs give equal windows; another epoch reorders."""
    spec = MixSpec((MixSource("web", np.array([50, 50, 50])), MixSource("code", np.array([30, 30]), 0.5)), 200)
    params = PlanParams(seed=3, world_size=2, batch_size=4, shuffle_window=32)
    first = [out.ids.tolist() for out in all_samples(mixture_plan(spec, params))]
    again = [out.ids.tolist() for out in all_samples(mixture_plan(spec, params))]
    later = PlanParams(**(params.to_dict() | {"epoch": 1}))
    other = [out.ids.tolist() for out in all_samples(mixture_plan(spec, later))]
    assert first == again and first != other


def test_schedule_changes_counts_and_cursors_continue() -> None:
    """MX6: piecewise-constant weights by epoch; cursors add up every earlier epoch's count."""
    web, code = MixSource("web", np.array([100])), MixSource("code", np.array([10]))
    spec = MixSpec((web, code), 50, schedule=(ScheduleStep(2, (1.0, 4.0)),))
    assert spec.counts(1).tolist() == [25, 25] and spec.counts(2).tolist() == [10, 40]
    assert spec.cursors(4).tolist() == [25 * 2 + 10 * 2, 25 * 2 + 40 * 2]
    assert spec.rebased(3, [7, 9]).cursors(4).tolist() == [17, 49]


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: MixSpec((), 10), "at least one source"),
        (lambda: MixSpec((MixSource("a", np.array([1])), MixSource("a", np.array([1]))), 10), "unique"),
        (lambda: MixSpec((MixSource("a", np.array([0])),), 10), "'a' has no samples"),
        (lambda: MixSource("a", np.array([1]), float("nan")), "finite"),
        (lambda: MixSpec((MixSource("a", np.array([1])),), 10, "zipped"), "composition"),
        (lambda: MixSpec((MixSource("a", np.array([1])),), -1), "samples_per_epoch"),
    ],
)
def test_bad_mixtures_are_refused_by_name(build: object, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        build()  # type: ignore[operator]


@pytest.mark.parametrize("counts", [[3_000_000, 1_234_567, 7], [10**9, 10**9 - 1, 1]])
def test_interleave_windows_of_large_counts_use_exact_keys(counts: list[int]) -> None:
    """MX3 past the int64 key range: a window's merged order follows prefix() position by position."""
    mix = Interleave(counts)
    lo = mix.total // 3
    before = [mix.prefix(p) for p in range(lo, lo + 300)]
    after = [mix.prefix(p + 1) for p in range(lo, lo + 300)]
    merged = mix.merged(before[0], after[-1])
    sizes = np.array(after[-1]) - np.array(before[0])
    source = np.repeat(np.arange(len(counts)), sizes)[merged]
    assert source.tolist() == [int(np.argmax(np.array(b) - np.array(a))) for a, b in zip(before, after, strict=True)]


@PROPERTY
@given(ms.mix_specs(), ms.mix_params(), st.integers(0, 2**32 - 1))
def test_shards_of_lists_what_the_windows_read(spec: MixSpec, params: PlanParams, seed: int) -> None:
    """P8 for mixtures (the cache's prefetch list): from any batch-aligned start, shards_of(c)
    names exactly the global shards that c's remaining windows decode (non-empty spans)."""
    plan = mixture_plan(spec, params)
    rng = np.random.default_rng(seed)
    for consumer in range(plan.num_consumers):
        start = int(rng.integers(0, plan.num_batches(consumer) + 1)) * params.batch_size
        read = {s.shard_index for w in plan.consumer_windows(consumer, start) if w.num_samples
                for s in w.spans if s.num_samples}
        assert read <= set(plan.shards_of(consumer, start))
        assert set(plan.shards_of(consumer, start)) <= read | {s.shard_index for w in plan.consumer_windows(
            consumer, start) for s in w.spans}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=70), st.one_of(st.none(), st.integers(0, 5000)),
       st.integers(0, 10**6), st.integers(0, 50))
def test_a_windows_within_source_permutations_at_once_equal_each_alone(
        sizes: list[int], large: int | None, seed: int, index: int) -> None:
    """MX4 (stratified): the window's per-source permutations made together (one row-wise
    argsort of the padded Philox streams, or one by one when the sizes are uneven) equal
    ``_zero_based_perm`` of each source alone, keyed ``(12, seed, epoch, j, source)``."""
    from shardkit.plan.mixture.sequence import _within_perms, _zero_based_perm
    from shardkit.plan.rng import philox_key, philox_keys

    counts = np.array(sizes + ([] if large is None else [large]), dtype=np.int64)
    key = (seed, 3)
    alone = [_zero_based_perm(key, index, i, int(m)) for i, m in enumerate(counts.tolist())]
    together = _within_perms(key, index, counts)
    assert together.dtype == np.int64
    assert together.tolist() == np.concatenate([np.zeros(0, dtype=np.int64)] + alone).tolist()
    assert philox_keys((12, *key, index), range(-1, 3)) == [philox_key(12, *key, index, j) for j in range(-1, 3)]
