"""Per-sample weights at plan level: specs/sample-weights.md SW1-SW6 over weights, epoch sizes,
topologies, kill points and elastic changes."""

from __future__ import annotations

import collections
import json
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError
from shardkit.plan import Plan, PlanParams, Window, plan_to_state
from shardkit.plan.sample_weights import SampleWeights, epoch_offset, multiplicities
from shardkit.plan.weighted_sequence import weighted_plan
from tests.helpers.mixture_strategies import delivered, dropped_ids, mix_params, sequence_ids
from tests.helpers.plan_strategies import all_samples, assert_equal_steps, assert_level_steps, kill_offsets

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WEIGHT_VALUES = [0.0, 1e-7, 0.01, 0.3, 1.0, 2.5, 40.0]


@st.composite
def weighted(draw: st.DrawFn, /) -> tuple[SampleWeights, int]:
    """Shards of 0-15 samples (empty ones too), weights from 0 through tiny to large (at least
    one positive), and an epoch of 0 to 3N + 5 samples."""
    sizes = draw(st.lists(st.integers(0, 15), min_size=1, max_size=8))
    total = sum(sizes)
    values = draw(st.lists(st.sampled_from(WEIGHT_VALUES), min_size=total, max_size=total))
    if total and not any(values):
        values[draw(st.integers(0, total - 1))] = 1.0
    return SampleWeights(np.array(values), sizes), draw(st.integers(0, 3 * total + 5)) if total else 0


def expected_multiset(weights: SampleWeights, total: int, params: PlanParams) -> collections.Counter[int]:
    m = multiplicities(weights, total, params.seed, params.epoch)
    return collections.Counter({j: int(k) for j, k in enumerate(m) if k})


def targets(weights: SampleWeights, total: int) -> np.ndarray:
    stored = weights.weights.astype(np.float64)
    return stored * total / stored.sum()


@PROPERTY
@given(weighted(), st.integers(0, 2**40), st.integers(0, 5))
def test_multiplicities_sum_to_the_epoch_and_round_each_weight(
    case: tuple[SampleWeights, int], seed: int, epoch: int
) -> None:
    """SW1: sum(m) = T. SW2: each m_j and each run of consecutive samples within 1 of its share;
    weight 0 never appears, a share >= 1 always does."""
    weights, total = case
    m = multiplicities(weights, total, seed, epoch)
    assert len(m) == weights.num_samples and int(m.sum()) == total
    target = targets(weights, total)
    assert np.all(np.abs(m - target) < 1 + 1e-9)
    assert not m[weights.weights == 0].any()
    assert np.all(m[target >= 1] >= 1)
    if len(m):
        lo, hi = sorted(np.random.default_rng(seed).integers(0, len(m) + 1, 2))
        assert abs(int(m[lo:hi].sum()) - target[lo:hi].sum()) < 1 + 1e-9


def test_the_expected_multiplicity_is_the_share_over_epochs() -> None:
    """SW2: U is uniform over epochs, so the mean count of a sample approaches its share."""
    weights = SampleWeights(np.array([1.0, 0.2, 0.05, 3.0, 0.0, 0.75]), [4, 2])
    mean = np.mean([multiplicities(weights, 7, 0, epoch) for epoch in range(2000)], axis=0)
    np.testing.assert_allclose(mean, targets(weights, 7), atol=0.05)


@PROPERTY
@given(weighted(), mix_params())
def test_a_plan_delivers_the_epoch_multiset_in_equal_steps(case: tuple[SampleWeights, int], params: PlanParams) -> None:
    """SW4 (P1-P4): the consumers' real samples plus the dropped tail are the epoch multiset,
    every rank has the same steps, pads are flagged repeats."""
    weights, total = case
    plan = weighted_plan(weights, total, params)
    assert_equal_steps(plan, total)
    outputs = all_samples(plan)
    got = collections.Counter(int(i) for out in outputs for i in out.ids[~out.padded])
    got.update(dropped_ids(plan))
    assert got == expected_multiset(weights, total, params)
    for consumer, out in enumerate(outputs):
        assert len(out.ids) == plan.num_samples(consumer)
        assert not out.padded[: plan.num_real_samples(consumer)].any()


@st.composite
def chains(draw: st.DrawFn, /) -> tuple[SampleWeights, int, list[PlanParams], list[int]]:
    weights, total = draw(weighted())
    first = draw(mix_params())
    chain = [first]
    for _ in range(draw(st.integers(1, 3))):
        chain.append(chain[-1] if draw(st.booleans()) else draw(mix_params(epoch=first.epoch)))
    seeds = draw(st.lists(st.integers(0, 2**32 - 1), min_size=len(chain) - 1, max_size=len(chain) - 1))
    return weights, total, chain, seeds


@PROPERTY
@given(chains())
def test_any_chain_of_resumes_delivers_the_epoch_multiset(
    case: tuple[SampleWeights, int, list[PlanParams], list[int]],
) -> None:
    """SW4: killed at random batches and resumed on the same or another topology (ranks,
    workers, batch size, tail), again and again: what every level delivered plus the last plan's
    real and dropped samples is the epoch multiset, and each level has equal steps."""
    weights, total, chain, seeds = case
    plan = weighted_plan(weights, total, chain[0])
    consumed: list[int] = []
    for params, seed in zip(chain[1:], seeds, strict=True):
        offsets = kill_offsets(plan, seed)
        consumed.extend(delivered(plan, offsets))
        state = json.loads(json.dumps(plan_to_state(plan, offsets, "fp")))
        before = plan
        plan = weighted_plan(weights, total, params, state)
        if params.same_partition(before.params):
            assert plan.start_offsets == tuple(offsets)  # R2: the same plan, continued
        else:
            assert_level_steps(before, offsets, plan)
    everything = [plan.num_samples(c) for c in range(plan.num_consumers)]
    got = collections.Counter(consumed + delivered(plan, everything) + dropped_ids(plan))
    assert got == expected_multiset(weights, total, chain[0])


def elements(windows: list[Window], offsets: np.ndarray) -> list[tuple[int, int]]:
    """(sample, copy number) of every real output of ``windows``."""
    found: list[tuple[int, int]] = []
    for window in windows:
        real = ~window.padded_mask()
        copies = window.copies if window.copies is not None else np.zeros(window.num_samples, dtype=np.int64)
        found += zip(window.global_indices(offsets)[real].tolist(), copies[real].tolist(), strict=True)
    return found


def delivered_elements(plan: Plan, offsets: list[int]) -> list[tuple[int, int]]:
    """The epoch elements consumers delivered between start_offsets and ``offsets``."""
    found: list[tuple[int, int]] = []
    for consumer, offset in enumerate(offsets):
        windows = list(plan.consumer_windows(consumer, plan.start_offsets[consumer]))
        found += elements(windows, plan.shard_offsets)[: max(offset - plan.start_offsets[consumer], 0)]
    return found


@PROPERTY
@given(chains())
def test_each_element_of_the_multiset_is_delivered_once_across_resumes(
    case: tuple[SampleWeights, int, list[PlanParams], list[int]],
) -> None:
    """SW4 + SW8, element by element: across a chain of resumes every (sample, copy number) of
    the epoch is delivered or dropped exactly once, and they are exactly copies 0 .. m_j - 1."""
    weights, total, chain, seeds = case
    plan = weighted_plan(weights, total, chain[0])
    consumed: list[tuple[int, int]] = []
    for params, seed in zip(chain[1:], seeds, strict=True):
        offsets = kill_offsets(plan, seed)
        consumed += delivered_elements(plan, offsets)
        plan = weighted_plan(weights, total, params, plan_to_state(plan, offsets, "fp"))
    everything = [plan.num_samples(c) for c in range(plan.num_consumers)]
    consumed += delivered_elements(plan, everything)
    consumed += elements(list(plan.remainder(everything).windows(0, plan.num_dropped)), plan.shard_offsets)
    m = multiplicities(weights, total, chain[0].seed, chain[0].epoch)
    assert sorted(consumed) == [(j, r) for j in range(len(m)) for r in range(int(m[j]))]


def sequence_of(plan: Plan) -> list[int]:
    return [int(i) for out in all_samples(plan) for i in out.ids]


@PROPERTY
@given(weighted(), mix_params())
def test_plans_are_deterministic_and_unshuffled_plans_keep_manifest_order(
    case: tuple[SampleWeights, int], params: PlanParams
) -> None:
    """SW3: the same inputs give the same plan; without shuffle the epoch sequence is the
    manifest order with each sample repeated m_j times in a row (step 3)."""
    weights, total = case
    plan = weighted_plan(weights, total, params)
    again = weighted_plan(SampleWeights(weights.weights.copy(), weights.shard_sizes), total, params)
    assert sequence_of(plan) == sequence_of(again)
    unshuffled = weighted_plan(weights, total, PlanParams(seed=params.seed, epoch=params.epoch, shuffle=False))
    m = multiplicities(weights, total, params.seed, params.epoch)
    source = unshuffled.remainder([0])  # level 0's whole sequence
    assert sequence_ids(unshuffled, source) == np.repeat(np.arange(len(m)), m).tolist()


def test_another_epoch_gives_another_rounding_and_order() -> None:
    """SW3: U and the window permutations follow the epoch."""
    weights = SampleWeights(np.linspace(0.1, 3.0, 400), [100, 150, 150])
    first = weighted_plan(weights, 400, PlanParams(epoch=0, shuffle_window=64))
    second = weighted_plan(weights, 400, PlanParams(epoch=1, shuffle_window=64))
    assert epoch_offset(0, 0) != epoch_offset(0, 1)
    assert sequence_of(first) != sequence_of(second)


@PROPERTY
@given(weighted(), mix_params())
def test_a_window_decodes_each_sample_once_and_copies_share_windows(
    case: tuple[SampleWeights, int], params: PlanParams
) -> None:
    """Step 4, SW5, SW8: a window's spans never overlap (a sample is decoded once however many
    copies it outputs), a sample's copies span at most ceil(m / win) + 1 windows, and they are
    numbered 0 .. m - 1."""
    weights, total = case
    one = replace(params, world_size=1, num_workers=0, batch_size=1)  # the whole epoch, one range
    plan = weighted_plan(weights, total, one)
    source = plan.remainder([0])
    windows_of: dict[int, set[int]] = collections.defaultdict(set)
    copies_of: dict[int, list[int]] = collections.defaultdict(list)
    for number, window in enumerate(source.windows(0, len(source))):
        decoded = [(s.shard_index, i) for s in window.spans for i in range(s.start, s.end)]
        assert len(decoded) == len(set(decoded))
        assert window.copies is not None and len(window.copies) == window.num_samples
        for index, copy in zip(window.global_indices(plan.shard_offsets).tolist(), window.copies.tolist(), strict=True):
            windows_of[index].add(number)
            copies_of[index].append(copy)
    m = multiplicities(weights, total, params.seed, params.epoch)
    assert {index: sorted(found) for index, found in copies_of.items()} == {
        index: list(range(int(k))) for index, k in enumerate(m) if k
    }
    for index, numbers in windows_of.items():
        assert len(numbers) <= -(-int(m[index]) // params.shuffle_window) + 1


def test_worked_example() -> None:
    """The worked example of specs/sample-weights.md (class-balanced, 23 samples)."""
    labels = np.array([0] * 20 + [1] * 3)
    weights = SampleWeights(1.0 / np.bincount(labels)[labels], [5, 0, 7, 3, 8])
    m = multiplicities(weights, 23, 0, 0)
    assert m.tolist() == [0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 0, 4, 4, 4]
    assert [int(m[labels == k].sum()) for k in (0, 1)] == [11, 12]
    params = PlanParams(world_size=2, num_workers=2, batch_size=3, shuffle=False, shuffle_window=4)
    plan = weighted_plan(weights, 23, params)
    got = [out.ids.tolist() for out in all_samples(plan)]
    assert got == [[1, 3, 4, 6, 8, 10], [11, 13, 15], [16, 18, 20, 20, 20, 20], [21, 21, 21]]
    assert dropped_ids(plan) == [21, 22, 22, 22, 22]
    shuffled = all_samples(
        weighted_plan(weights, 23, PlanParams(world_size=2, num_workers=2, batch_size=3, shuffle_window=4))
    )
    assert shuffled[0].ids.tolist() == [10, 13, 8, 6, 11, 15]
    assert shuffled[2].ids.tolist() == [20, 20, 20, 21, 21, 21]


@pytest.mark.parametrize(
    ("values", "sizes", "message"),
    [
        ([1.0, 2.0], [3], "expected 3 weights"),
        ([1.0, float("nan"), 1.0], [3], "sample 1: weight nan"),
        ([1.0, 1.0, -0.5], [1, 2], "sample 2: weight -0.5"),
        ([1.0, float("inf"), 1.0], [3], "sample 1: weight inf"),
        ([0.0, 0.0], [2], "every weight is 0"),
        (["a", "b"], [2], "one number per sample"),
    ],
)
def test_bad_weights_are_refused_naming_the_sample(values: list[object], sizes: list[int], message: str) -> None:
    """SW6: a PlanError naming the weights and the sample at fault."""
    with pytest.raises(PlanError, match=message) as caught:
        SampleWeights(values, sizes, where="field 'w' of /data/x")  # type: ignore[arg-type]
    assert "field 'w' of /data/x" in str(caught.value)


def test_a_bad_epoch_size_is_refused() -> None:
    """SW6: samples_per_epoch must be an int >= 0."""
    weights = SampleWeights([1.0, 2.0], [2])
    for bad in (-1, 2.5, True):
        with pytest.raises(PlanError, match="samples_per_epoch"):
            weighted_plan(weights, bad, PlanParams())  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="every weight is 0, but samples_per_epoch is 3"):
        weighted_plan(SampleWeights([], [0, 0]), 3, PlanParams())


def test_weighted_plans_stay_per_shard_at_scale() -> None:
    """Cost table: beyond the weights (4 B/sample), a plan, a seek into the last consumer and an
    elastic re-plan of 1e7 samples in 1e4 shards for 4,096 consumers allocate no per-sample
    array (peak traced memory far below the 40 MB of the weights themselves)."""
    sizes = np.random.default_rng(0).integers(0, 2_000, 10_000)
    weights = SampleWeights(np.random.default_rng(1).random(int(sizes.sum())).astype(np.float32), sizes)
    total = 3 * weights.num_samples // 2
    tracemalloc.start()
    try:
        plan = weighted_plan(weights, total, PlanParams(world_size=512, num_workers=8, batch_size=32))
        last = plan.num_consumers - 1
        window = next(plan.consumer_windows(last, plan.num_samples(last) // 2 // 32 * 32))
        assert 0 < window.num_samples <= 8192 and window.num_decoded <= 8192 + 64 * len(window.spans)
        offsets = [plan.num_samples(c) // 2 // 32 * 32 for c in range(plan.num_consumers)]
        elastic = weighted_plan(
            weights, total, PlanParams(world_size=300, num_workers=6, batch_size=48), plan_to_state(plan, offsets, "fp")
        )
        assert elastic.num_consumers == 1800 and elastic.level == 1
        assert 0 < next(elastic.consumer_windows(1799, elastic.num_samples(1799) // 2)).num_samples
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
