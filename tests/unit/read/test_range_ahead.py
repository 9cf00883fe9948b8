"""K33: how a remote run's blocks are grouped into range requests and bounded in flight."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.read.range_ahead import RangeOptions, RangesAhead, group_blocks

sizes_st = st.lists(st.integers(1, 5000), min_size=1, max_size=40)


@given(sizes=sizes_st, coalesce=st.integers(1, 20000), first=st.integers(0, 39))
def test_groups_cover_the_run_in_order_first_block_alone(sizes: list[int], coalesce: int, first: int) -> None:
    blocks = range(min(first, len(sizes) - 1), len(sizes))
    groups = group_blocks(sizes, blocks, coalesce)
    assert [i for g in groups for i in g] == list(blocks)
    assert len(groups[0]) == 1
    for group in groups[1:]:
        assert len(group) == 1 or sum(sizes[i] for i in group) <= coalesce


@settings(max_examples=40, deadline=None)
@given(
    sizes=sizes_st,
    requests=st.integers(1, 4),
    max_bytes=st.integers(1, 30000),
    coalesce=st.integers(1, 12000),
    stop_after=st.integers(0, 40),
)
def test_blocks_come_back_in_order_within_the_bounds(
    sizes: list[int], requests: int, max_bytes: int, coalesce: int, stop_after: int
) -> None:
    """Every block is the one asked for; requests and outstanding bytes stay within the
    options (one group alone may exceed ``max_bytes``); closing early leaves no thread."""
    options = RangeOptions(max_requests=requests, max_bytes=max_bytes, coalesce_bytes=coalesce)
    lock = threading.Lock()
    state = {"running": 0, "most": 0, "requested": 0, "taken": 0}

    def fetch(first: int, stop: int) -> list[bytes]:
        with lock:
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
            state["requested"] += sum(sizes[first:stop])
            outstanding = state["requested"] - state["taken"]
            # ``take`` may start a request before the test counts the block it returned
            assert outstanding <= max(max_bytes, sum(sizes[first:stop])) + max(sizes)
        try:
            return [bytes([i % 256]) * sizes[i] for i in range(first, stop)]
        finally:
            with lock:
                state["running"] -= 1

    ahead = RangesAhead(fetch, sizes, range(len(sizes)), options)
    try:
        for index in range(min(stop_after, len(sizes))):
            assert ahead.take(index) == bytes([index % 256]) * sizes[index]
            with lock:
                state["taken"] += sizes[index]
    finally:
        ahead.close()
    assert state["most"] <= requests
    assert not [t for t in threading.enumerate() if t.name.startswith("shardkit-range")]


def test_a_fetch_error_is_raised_at_its_block() -> None:
    def fetch(first: int, stop: int) -> list[bytes]:
        if first <= 2 < stop:
            raise OSError(f"blocks {first}..{stop - 1} failed")
        return [b"x"] * (stop - first)

    ahead = RangesAhead(fetch, [1] * 5, range(5), RangeOptions(max_requests=2, coalesce_bytes=1))
    try:
        assert ahead.take(0) == ahead.take(1) == b"x"
        with pytest.raises(OSError, match="blocks 2..2 failed"):
            ahead.take(2)
    finally:
        ahead.close()


def test_options_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        RangeOptions(max_requests=0)
