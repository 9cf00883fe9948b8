"""K33, RP5, RP7: how a remote run's blocks are grouped into range requests and bounded in flight."""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Iterator

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


def drive(ahead: RangesAhead, sizes: list[int], groups: list[range], fetch: Callable[[int, int], list[bytes]],
          stop_after: int) -> Iterator[bytes]:
    """Take blocks ``0 … stop_after-1`` as the block fetcher does: before each take, submit the
    next groups while there is room (one request per group)."""
    pending = deque(groups)
    for index in range(stop_after):
        while pending and ahead.has_room(sum(sizes[i] for i in pending[0])):
            group = pending.popleft()
            ahead.submit(list(group), [sizes[i] for i in group], functools.partial(fetch, group.start, group.stop))
        if not ahead.holds(index):  # the consumer reached a block not requested: it goes alone
            group = pending.popleft()
            ahead.submit(list(group), [sizes[i] for i in group], functools.partial(fetch, group.start, group.stop))
        yield ahead.take()


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
        try:
            return [bytes([i % 256]) * sizes[i] for i in range(first, stop)]
        finally:
            with lock:
                state["running"] -= 1

    ahead = RangesAhead(options)
    groups = group_blocks(sizes, range(len(sizes)), coalesce)
    try:
        for index, got in enumerate(drive(ahead, sizes, groups, fetch, min(stop_after, len(sizes)))):
            assert got == bytes([index % 256]) * sizes[index]
            assert ahead._bytes <= max(max_bytes, *(sum(sizes[i] for i in g) for g in groups))
    finally:
        ahead.close()
    assert state["most"] <= requests
    assert not [t for t in threading.enumerate() if t.name.startswith("shardkit-range")]


def test_a_fetch_error_is_raised_at_its_block() -> None:
    def fetch(first: int, stop: int) -> list[bytes]:
        if first <= 2 < stop:
            raise OSError(f"blocks {first}..{stop - 1} failed")
        return [b"x"] * (stop - first)

    ahead = RangesAhead(RangeOptions(max_requests=2, coalesce_bytes=1))
    blocks = drive(ahead, [1] * 5, group_blocks([1] * 5, range(5), 1), fetch, 5)
    try:
        assert next(blocks) == next(blocks) == b"x"
        with pytest.raises(OSError, match="blocks 2..2 failed"):
            next(blocks)
    finally:
        ahead.close()


def test_options_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        RangeOptions(max_requests=0)
