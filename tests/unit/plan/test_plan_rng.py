"""Counter-based randomness: specs/partition.md P5 (determinism, pinned streams) and P11."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanParams, build_plan, sample_rng, shard_order
from shardkit.plan.rng import raw_stream, stable_argsort
from tests.helpers.plan_strategies import consumer_samples


def test_shard_order_is_pinned() -> None:
    """P5: the epoch shard order is a fixed function of (seed, epoch); pinned so that a
    NumPy or Python upgrade that changed it would fail here, not silently break resumes."""
    params = PlanParams(seed=0, epoch=0)
    assert shard_order(10, params).tolist() == PINNED_SHARD_ORDER
    assert shard_order(10, PlanParams(shuffle=False)).tolist() == list(range(10))


def test_window_order_is_pinned() -> None:
    """P5, P10: the window permutation is a fixed function of its key."""
    plan = build_plan([6, 6], PlanParams(seed=1, epoch=2, shuffle_window=4))
    assert consumer_samples(plan, 0).ids.tolist() == PINNED_CONSUMER_0


def test_sample_rng_depends_only_on_seed_epoch_index() -> None:
    """P11: per-sample generators are keyed by (seed, epoch, index), nothing else."""
    first = sample_rng(5, 1, 12345).random(4)
    assert np.array_equal(first, sample_rng(5, 1, 12345).random(4))
    assert not np.array_equal(first, sample_rng(5, 1, 12346).random(4))
    assert not np.array_equal(first, sample_rng(5, 2, 12345).random(4))
    assert not np.array_equal(first, sample_rng(6, 1, 12345).random(4))
    assert isinstance(sample_rng(0, 0, 0), np.random.Generator)


PAD = int(np.iinfo(np.uint64).max)


@settings(max_examples=150, deadline=None)
@given(rows=st.integers(1, 6), width=st.integers(1, 40), values=st.integers(1, 2**64 - 1),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_the_fast_stable_argsort_is_the_stable_one(rows: int, width: int, values: int, seed: int,
                                                   data: st.DataObject) -> None:
    """P5: permutations (``stable_argsort`` behind them) are the stable argsort of their keys,
    ties and the padded rows of a stratified window included (the real keys' places): keys drawn
    from ``values`` distinct ones tie often when ``values`` is small, and may be the pad value."""
    rng = np.random.default_rng(seed)
    keys = (rng.integers(0, values, (rows, width), dtype=np.uint64, endpoint=True)
            if values < 2**63 else rng.integers(0, 2**63, (rows, width), dtype=np.uint64) * 2)
    keys[rng.random((rows, width)) < 0.1] = PAD
    assert np.array_equal(stable_argsort(keys), np.argsort(keys, axis=-1, kind="stable"))
    assert np.array_equal(stable_argsort(keys[0]), np.argsort(keys[0], kind="stable"))
    lengths = np.array(data.draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows)), dtype=np.int64)
    keys[np.arange(width) >= lengths[:, None]] = PAD
    got, want = stable_argsort(keys, lengths), np.argsort(keys, axis=1, kind="stable")
    real = np.arange(width) < lengths[:, None]
    assert np.array_equal(got[real], want[real])


@settings(max_examples=100, deadline=None)
@given(width=st.integers(2, 300), spread=st.integers(0, 20), seed=st.integers(0, 2**32 - 1))
def test_keys_that_differ_only_in_the_index_bits_still_sort_stably(width: int, spread: int, seed: int) -> None:
    """P5: the value sort packs each key's index into its low bits; keys equal above those bits
    but different in them (``spread`` low bits of noise over a few shared high parts) must
    still come out in the stable argsort's order, and so must wide rows and 1-D keys."""
    rng = np.random.default_rng(seed)
    highs = rng.integers(0, 2**63, 3, dtype=np.uint64) * 2
    keys = highs[rng.integers(0, 3, (2, width))] + rng.integers(0, 2**spread, (2, width), dtype=np.uint64)
    assert np.array_equal(stable_argsort(keys), np.argsort(keys, axis=-1, kind="stable"))
    assert np.array_equal(stable_argsort(keys[1]), np.argsort(keys[1], kind="stable"))
    lengths = rng.integers(0, width + 1, 2)
    keys[np.arange(width) >= lengths[:, None]] = PAD
    real = np.arange(width) < lengths[:, None]
    assert np.array_equal(stable_argsort(keys, lengths)[real], np.argsort(keys, axis=1, kind="stable")[real])


def test_rows_wider_than_the_packed_sort_take_the_argsort() -> None:
    """P5: keys too wide for the index bits (over 2**16 a row) sort by the argsort path."""
    keys = raw_stream(7, (1 << 16) + 5)
    keys[:10] = keys[10]  # ties: the stable sort decides
    assert np.array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))
    assert np.array_equal(stable_argsort(keys[10:]), np.argsort(keys[10:], kind="stable"))


def test_philox_words_take_the_fast_sort() -> None:
    """The fast path is the common one: 8,192 Philox words have no ties (the check passes)."""
    keys = raw_stream(12345, 8192)
    assert len(np.unique(keys)) == len(keys)
    assert np.array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


PINNED_SHARD_ORDER = [5, 6, 1, 7, 3, 2, 8, 4, 9, 0]
PINNED_CONSUMER_0 = [8, 7, 6, 9, 0, 1, 10, 11, 5, 2, 4, 3]
