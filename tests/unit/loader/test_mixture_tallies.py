"""``BatchTallies`` (loader/mixture_state.py, specs/mixture.md MX10): per-source counts of each
batch, counted a window at a time, equal those counted batch by batch from the batch's own
samples - whatever the window pieces, batch size, pads, source order and token lengths."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.loader.mixture_state import BatchTallies


def by_batch(indices: np.ndarray, padded: np.ndarray, bases: np.ndarray, order: np.ndarray,
             lengths: tuple[np.ndarray, ...] | None, batch: int) -> list[tuple[int, ...]]:
    """The counts batch by batch, sample by sample (the reference)."""
    found = []
    for lo in range(0, len(indices), batch):
        counts = [0] * (len(order) * (2 if lengths is not None else 1))
        for index, pad in zip(indices[lo:lo + batch].tolist(), padded[lo:lo + batch].tolist(), strict=True):
            if pad:
                continue
            in_plan = int(np.searchsorted(bases, index, side="right")) - 1
            source = int(order[in_plan])
            counts[source] += 1
            if lengths is not None:
                counts[len(order) + source] += int(lengths[source][index - int(bases[in_plan])])
        found.append(tuple(counts))
    return found


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=5), batch=st.integers(1, 9),
       batches=st.integers(0, 12), cuts=st.lists(st.integers(0, 120), max_size=8), tokens=st.booleans(),
       seed=st.integers(0, 2**16))
def test_counts_a_window_at_a_time_equal_counts_batch_by_batch(sizes, batch, batches, cuts, tokens, seed):
    rng = np.random.default_rng(seed)
    n = len(sizes)
    order = rng.permutation(n).astype(np.int64)  # the plan's sources, as this mixture numbers them
    plan_sizes = np.array(sizes, dtype=np.int64)[order]
    bases = np.concatenate([[0], np.cumsum(plan_sizes)]).astype(np.int64)
    total = int(bases[-1])
    count = batches * batch if total else 0
    indices = rng.integers(0, max(total, 1), count).astype(np.int64)
    padded = rng.random(count) < 0.2
    lengths = tuple(rng.integers(0, 3000, size).astype(np.uint32) for size in sizes) if tokens else None
    tallies = BatchTallies(bases[1:], order, n, batch, lengths)
    bounds = [0, *sorted({c for c in cuts if c < count}), count]
    for lo, hi in zip(bounds, bounds[1:], strict=False):  # the reader's pieces, any sizes, empty ones too
        tallies.add(indices[lo:hi], padded[lo:hi])
    got = [tuple(tallies.take().tolist()) for _ in range(batches if total else 0)]
    assert got == by_batch(indices, padded, bases, order, lengths, batch)
    assert not tallies.ready and not tallies.carry.any()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 3), st.integers(0, 5000), st.just(0)), min_size=2, max_size=70),
       st.data())
def test_the_bucket_table_finds_each_index_source_as_a_binary_search_does(sizes: list[int],
                                                                          data: st.DataObject) -> None:
    """MX10 tallies: the per-window source of each (shuffled) plan index by bucket table equals
    ``searchsorted(ends, indices, side="right")``, empty sources and indices at the ends included."""
    from shardkit.loader.mixture_state import _BucketLookup

    ends = np.cumsum(sizes)[:-1].astype(np.int64)
    total = sum(sizes)
    if total == 0:
        return
    picked = data.draw(st.lists(st.integers(0, total - 1), max_size=50))
    indices = np.array(picked + [0, total - 1] + [int(e) for e in ends if e < total]
                       + [int(e) - 1 for e in ends if 0 < e <= total], dtype=np.int64)
    lookup = _BucketLookup.of(ends)
    assert lookup is not None
    assert lookup.find(indices).tolist() == np.searchsorted(ends, indices, side="right").tolist()
