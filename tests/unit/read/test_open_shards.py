"""``OpenShards`` (RP1): at most ``limit`` descriptors held in all (a reader holding one or two)
and ``keep`` readers per owner, least recently used closed first, each exactly once, and never
the one just returned — checked against a plain list model over random access sequences."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardkit.read.open_shards import OpenShards


class Handle:
    """A reader stand-in that records its closing (OpenShards holds any object)."""

    def __init__(self, key: tuple[int, int], closed: list[tuple[int, int]]) -> None:
        self.key, self._closed = key, closed

    def close(self) -> None:
        self._closed.append(self.key)


def use(shards: OpenShards[Handle], owner: int, shard: int, keep: int, cost: int,
        closed: list[tuple[int, int]]) -> Handle:
    """What ShardOpener.reader does: the open one, or a new one added."""
    found = shards.get(owner, shard)
    if found is not None:
        return found
    handle = Handle((owner, shard), closed)
    shards.add(owner, shard, handle, handle, keep, descriptors=cost)
    return handle


@given(limit=st.integers(2, 8), keeps=st.lists(st.integers(1, 3), min_size=1, max_size=4),
       costs=st.lists(st.integers(1, 2), min_size=4, max_size=4),
       accesses=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=60))
def test_open_shards_keeps_the_most_recent_within_both_bounds(limit: int, keeps: list[int], costs: list[int],
                                                             accesses: list[tuple[int, int]]) -> None:
    keeps = [min(keep, limit // costs[owner]) for owner, keep in enumerate(keeps)]
    shards: OpenShards[Handle] = OpenShards(limit)
    closed: list[tuple[int, int]] = []
    model: list[tuple[int, int]] = []  # open keys, least recently used first
    expected_closed: list[tuple[int, int]] = []
    for owner, shard in accesses:
        owner %= len(keeps)
        key = (owner, shard)
        handle = use(shards, owner, shard, keeps[owner], costs[owner], closed)
        if key in model:
            model.remove(key)
        model.append(key)
        mine = [k for k in model if k[0] == owner]
        for old in mine[:max(0, len(mine) - keeps[owner])]:
            model.remove(old)
            expected_closed.append(old)
        while sum(costs[k[0]] for k in model) > limit:
            expected_closed.append(model.pop(0))
        assert handle.key == key and key in model  # the one just returned stays open
        assert closed == expected_closed
        assert len(shards) == len(model)
        assert shards.descriptors == sum(costs[k[0]] for k in model) <= limit
        assert all(sum(k[0] == o for k in model) <= keeps[o] for o in range(len(keeps)))
    for owner in range(len(keeps)):
        shards.close_owner(owner)
    assert len(shards) == 0
    assert sorted(closed) == sorted(expected_closed + model)  # every handle closed exactly once


def test_an_owner_may_not_keep_more_descriptors_than_the_limit() -> None:
    with pytest.raises(ValueError, match="exceeds the limit of 3"):
        OpenShards[Handle](3).add(0, 0, Handle((0, 0), []), Handle((0, 0), []), keep=2, descriptors=2)
