"""ST4's plan, as pure maths: which requests ``read_ranges`` makes for a set of ranges
(storage/ranges.py). The store-level behaviour, on every backend: test_store_contract.py."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardkit.storage.ranges import RangeOptions, fetch_ranges, plan_requests

SIZE = 10_000
RANGES = st.lists(st.tuples(st.integers(0, SIZE), st.integers(0, 3000)).map(
    lambda pair: (pair[0], min(SIZE, pair[0] + pair[1]))), max_size=20)
OPTIONS = st.builds(RangeOptions, gap_bytes=st.integers(0, 2000), request_bytes=st.integers(1, 6000),
                    max_in_flight=st.integers(1, 4))
DATA = bytes(range(256)) * (SIZE // 256 + 1)


@given(RANGES, OPTIONS)
def test_requests_are_sorted_disjoint_and_hold_every_range_st4(ranges: list[tuple[int, int]],
                                                              options: RangeOptions) -> None:
    requests = plan_requests(ranges, options)
    assert requests == sorted(requests)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(requests, requests[1:], strict=False))
    for start, end in ranges:
        if end > start:
            assert sum(lo <= start and end <= hi for lo, hi in requests) == 1
    asked = [r for r in ranges if r[1] > r[0]]
    assert len(requests) <= len(asked)
    # every request starts where an asked range starts and ends where one ends: no bytes made up
    assert all(any(lo == s for s, _ in asked) and any(hi == e for _, e in asked) for lo, hi in requests)


@given(RANGES, OPTIONS)
def test_two_requests_are_apart_by_more_than_the_gap_or_would_be_too_large_merged_st4(
        ranges: list[tuple[int, int]], options: RangeOptions) -> None:
    requests = plan_requests(ranges, options)
    for (a_start, a_end), (b_start, b_end) in zip(requests, requests[1:], strict=False):
        assert b_start - a_end > options.gap_bytes or b_end - a_start > options.request_bytes


def test_nearby_ranges_merge_and_far_ones_do_not_st4() -> None:
    options = RangeOptions(gap_bytes=100, request_bytes=1000)
    assert plan_requests([(500, 510), (0, 10), (50, 60), (5, 8)], options) == [(0, 60), (500, 510)]
    assert plan_requests([(0, 600), (650, 1200)], options) == [(0, 600), (650, 1200)]  # merged: too large
    assert plan_requests([(0, 2000), (10, 20)], options) == [(0, 2000)]  # inside: always one
    assert plan_requests([(5, 5), (7, 7)], options) == []


@given(RANGES, OPTIONS)
def test_fetch_ranges_slices_each_range_out_of_its_request_st4(ranges: list[tuple[int, int]],
                                                              options: RangeOptions) -> None:
    asked: list[tuple[int, int]] = []
    lock = threading.Lock()

    def fetch(start: int, end: int) -> bytearray:
        with lock:
            asked.append((start, end))
        return bytearray(DATA[start:end])

    assert fetch_ranges(ranges, fetch, options) == [DATA[s:e] for s, e in ranges]
    assert sorted(asked) == plan_requests(ranges, options)


def test_the_first_error_of_a_request_is_raised_st4() -> None:
    def fetch(start: int, end: int) -> bytearray:
        if start >= 5000:
            raise OSError(f"bytes [{start}, {end}) unreadable")
        return bytearray(end - start)

    with pytest.raises(OSError, match=r"bytes \[5000, 5010\) unreadable"):
        fetch_ranges([(0, 10), (5000, 5010), (9000, 9010)], fetch, RangeOptions(gap_bytes=0, max_in_flight=3))


@pytest.mark.parametrize("bad", [{"gap_bytes": -1}, {"request_bytes": 0}, {"max_in_flight": 0}])
def test_range_options_refuse_nonsense(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="invalid RangeOptions"):
        RangeOptions(**bad)
