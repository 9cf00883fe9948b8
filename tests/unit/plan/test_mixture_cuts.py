"""Counting a cut ``random`` window from its Philox stream (specs/mixture.md MX12, "cut
windows"): the per-block counts of the first ``t`` outputs equal those of the window's listed
order (``argsort`` of the stream), for real streams and for adversarial values (ties, values
far from uniform, so the band misses and the exact fallback counts)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan.mixture.cuts import CHUNK, first_counts, first_counts_of
from shardkit.plan.rng import philox_key, raw_stream

WORD = (1 << 64) - 1


def listed_counts(raw: np.ndarray, sizes: np.ndarray, count: int) -> list[int]:
    """Reference: the blocks of the first ``count`` outputs of the listed order."""
    block = np.repeat(np.arange(len(sizes)), sizes)
    return np.bincount(block[np.argsort(raw, kind="stable")[:count]], minlength=len(sizes)).tolist()


@st.composite
def blocks(draw: st.DrawFn, /, max_width: int) -> np.ndarray:
    """Block sizes (some empty, at either end too) summing to 2..max_width."""
    sizes = draw(st.lists(st.integers(0, max_width // 3), min_size=1, max_size=6).filter(lambda s: sum(s) >= 2))
    return np.array(sizes, dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(blocks(max_width=3000), st.integers(0, 2**32), st.data())
def test_a_cut_of_a_philox_window_counts_its_listed_outputs(sizes: np.ndarray, seed: int,
                                                             data: st.DataObject) -> None:
    """MX12: for real window streams, of any length and cut anywhere (0 and the whole
    included), ``first_counts`` equals the listed order's counts, a chunk of streams at once."""
    width = int(sizes.sum())
    rows = data.draw(st.integers(1, CHUNK + 3))  # more rows than a chunk: two passes
    counts = np.array(data.draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows)))
    keys = [philox_key(12, seed, j) for j in range(rows)]
    found = first_counts(keys, np.tile(sizes, (rows, 1)), counts)
    assert found.tolist() == [listed_counts(raw_stream(k, width), sizes, int(c)) for k, c in zip(keys, counts,
                                                                                                 strict=True)]


@settings(max_examples=120, deadline=None)
@given(blocks(max_width=240), st.data())
def test_any_values_are_counted_exactly_ties_and_skew_included(sizes: np.ndarray, data: st.DataObject) -> None:
    """MX12: the band is only a shortcut: values that tie (few distinct ones, the maximum
    included) or crowd at one end of the range (the band misses the t-th smallest) are counted
    as the listed order (a stable argsort: ties in index order) counts them."""
    width = int(sizes.sum())
    rows = data.draw(st.integers(1, 4))
    pool = data.draw(st.sampled_from([[0, 1, 2, WORD], [WORD - 3, WORD - 2, WORD - 1, WORD], list(range(0, 64))]))
    uniform = st.integers(0, WORD)
    values = st.one_of(st.sampled_from(pool), uniform) if data.draw(st.booleans()) else st.sampled_from(pool)
    raw = np.array(data.draw(st.lists(st.lists(values, min_size=width, max_size=width), min_size=rows,
                                      max_size=rows)), dtype=np.uint64)
    counts = np.array(data.draw(st.lists(st.integers(1, width - 1), min_size=rows, max_size=rows)))
    found = first_counts_of(raw, np.tile(sizes, (rows, 1)), counts)
    assert found.tolist() == [listed_counts(r, sizes, int(c)) for r, c in zip(raw, counts, strict=True)]
