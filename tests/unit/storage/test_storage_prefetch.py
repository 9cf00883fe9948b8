"""Prefetcher (K10) and cache-less range read-ahead, over an in-memory remote store."""

from __future__ import annotations

import os

import pytest

from shardkit.errors import NotFoundError
from shardkit.storage import CacheItem, CacheOptions, ShardCache, Store
from tests.helpers.s3 import memory_store

SIZE = 20_000
FAST = CacheOptions(space_timeout=0.5, lock_timeout=10, poll_interval=0.02)


@pytest.fixture
def remote() -> Store:
    return memory_store("prefetch-test", [f"s/{i}" for i in range(6)], SIZE)


def read_file(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def items(indexes: list[int]) -> list[CacheItem]:
    return [CacheItem(f"s/{i}", f"fp/{i}", SIZE) for i in indexes]


def test_prefetch_downloads_ahead_and_yields_every_entry(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 100 * SIZE, FAST)
    plan = items([0, 1, 2, 3, 4, 5])
    with cache.prefetch(remote, plan, max_ahead=2) as prefetcher:
        for index, item in enumerate(plan):
            with prefetcher.open(item) as path:
                assert read_file(path) == bytes([index]) * SIZE
    assert cache.stats.misses == 6  # each downloaded once, by the prefetcher or the consumer


def test_prefetch_error_surfaces_at_that_entry(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 100 * SIZE, FAST)
    plan = [*items([0]), CacheItem("s/missing", "fp/missing", SIZE), *items([1])]
    with cache.prefetch(remote, plan, max_ahead=3) as prefetcher:
        with prefetcher.open(plan[0]):
            pass  # the missing entry's failure is not raised here
        with pytest.raises(NotFoundError, match="s/missing") as info:
            with prefetcher.open(plan[1]):
                pass
        assert any("prefetch" in note for note in info.value.__notes__)
        with prefetcher.open(plan[2]) as path:
            assert read_file(path) == bytes([1]) * SIZE


def test_prefetch_is_bounded_by_bytes(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 100 * SIZE, FAST)
    prefetcher = cache.prefetch(remote, items([0, 1, 2, 3]), max_ahead=4, max_bytes=2 * SIZE)
    try:
        assert len(prefetcher._ahead) == 2
    finally:
        prefetcher.close()
    assert len([f for f in os.listdir(cache.root) if f.endswith(".data")]) <= 2
    assert not [f for f in os.listdir(cache.root) if ".tmp-" in f]


def test_a_lazy_prefetch_walks_its_items_only_as_far_as_the_window_ahead(remote: Store, tmp_path: object) -> None:
    """K10 with ``lazy=True`` (specs/partition.md P35): the walk is taken a few items ahead of the
    consumer, never whole up front; repeats in it are listed once; an entry the consumer reaches
    before the walk listed it moves the walk there; every entry downloads once."""
    cache = ShardCache(str(tmp_path), 100 * SIZE, FAST)
    walked: list[int] = []

    def walk():  # type: ignore[no-untyped-def]
        for index in [0, 1, 0, 2, 3, 4, 5]:
            walked.append(index)
            yield CacheItem(f"s/{index}", f"fp/{index}", SIZE)

    with cache.prefetch(remote, walk(), max_ahead=1, lazy=True) as prefetcher:
        assert walked == [0, 1]  # one ahead, one pending: not the whole walk
        for index in (0, 1, 0, 4, 5):  # 2 and 3 skipped: reaching 4 walks through them
            with prefetcher.open(CacheItem(f"s/{index}", f"fp/{index}", SIZE)) as path:
                assert read_file(path) == bytes([index]) * SIZE
        assert walked == [0, 1, 0, 2, 3, 4, 5]
    assert cache.stats.misses <= 6
