"""Plan-aware eviction (K30–K32 in specs/cache.md): the entry whose next use is furthest away
goes first, against a reference Belady model; horizons; dead publishers are ignored."""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.storage import CacheOptions, ShardCache
from shardkit.storage.cache_layout import entry_name
from shardkit.storage.eviction import scan
from shardkit.storage.next_use import USES_DIR, UsePublisher, read_next_uses
from tests.helpers.s3 import memory_store

SIZE = 64
NAMES = [f"s{i}.bin" for i in range(8)]


def _open(cache: ShardCache, store: Any, index: int) -> None:
    with cache.open(store, NAMES[index], key=NAMES[index], num_bytes=SIZE):
        pass


def _cached(cache: ShardCache) -> set[str]:
    return {name for name, item in scan(cache.root).items() if item.published}


def belady(sequence: list[int], capacity: int) -> tuple[int, list[set[int]]]:
    """Reference model: misses, and after each access the cached items that are used again.
    On a miss with a full cache, drop the item used again furthest ahead (never: first)."""
    cached: set[int] = set()
    misses, states = 0, []
    for position, item in enumerate(sequence):
        ahead = sequence[position + 1 :]
        if item not in cached:
            misses += 1
            if len(cached) >= capacity:
                cached.remove(max(cached, key=lambda c: ahead.index(c) if c in ahead else len(sequence)))
            cached.add(item)
        states.append({c for c in cached if c in ahead})
    return misses, states


@settings(max_examples=30, deadline=None)
@given(
    sequence=st.lists(st.integers(0, 6), min_size=1, max_size=24), capacity=st.integers(1, 5), horizon=st.integers(0, 3)
)
def test_evicts_like_belady(sequence: list[int], capacity: int, horizon: int) -> None:
    """K30/K31, one consumer: the downloads are Belady's (optimal) count, and after every access
    the cache holds exactly the model's entries among those used again."""
    store = memory_store("belady", NAMES, SIZE)
    with tempfile.TemporaryDirectory() as tmp:
        cache = ShardCache(tmp, capacity * SIZE, CacheOptions(space_timeout=5))
        publisher = UsePublisher(cache.root, [entry_name(NAMES[i]) for i in sequence], horizon)
        misses, states = belady(sequence, capacity)
        try:
            for position, index in enumerate(sequence):
                publisher.reach(entry_name(NAMES[index]))
                _open(cache, store, index)
                used_again = {entry_name(NAMES[i]) for i in sequence[position + 1 :]}
                assert _cached(cache) & used_again == {entry_name(NAMES[i]) for i in states[position]}
                assert len(_cached(cache)) <= capacity
        finally:
            publisher.close()
        assert cache.stats.misses == misses


def test_without_publishers_eviction_is_lru(tmp_path: Any) -> None:
    """K6 fallback: no consumer publishes, so the least recently used entry goes."""
    store = memory_store("lru", NAMES, SIZE)
    cache = ShardCache(str(tmp_path), 2 * SIZE)
    _open(cache, store, 0)
    _open(cache, store, 1)
    os.utime(scan(cache.root)[entry_name(NAMES[0])].entry.data, (1, 1))  # 0: long unused
    _open(cache, store, 2)
    assert _cached(cache) == {entry_name(NAMES[1]), entry_name(NAMES[2])}


def test_an_entry_in_a_horizon_goes_last(tmp_path: Any) -> None:
    """K31: consumer A needs s0 in 3 steps, within its horizon of 4; B needs s1 in 2, beyond its
    horizon of 1. Belady alone would drop s0 (further); the horizon keeps it. With only
    horizon entries left, one is evicted rather than waiting."""
    store = memory_store("horizon", NAMES, SIZE)
    cache = ShardCache(str(tmp_path), 2 * SIZE, CacheOptions(space_timeout=2))
    names = [entry_name(n) for n in NAMES]
    first = UsePublisher(cache.root, [names[5], names[6], names[7], names[0]], horizon=4)
    second = UsePublisher(cache.root, [names[4], names[3], names[1]], horizon=1)
    try:
        _open(cache, store, 0)
        _open(cache, store, 1)
        first.reach(names[5])
        second.reach(names[4])
        _open(cache, store, 2)
        assert _cached(cache) == {names[0], names[2]}
        third = UsePublisher(cache.root, [names[2]], horizon=1)
        _open(cache, store, 3)  # s0 and s2 both in a horizon now: s0 (further) goes
        third.close()
        assert _cached(cache) == {names[2], names[3]}
    finally:
        first.close()
        second.close()


def _publish_and_wait(root: str, entries: list[str], ready: Any) -> None:
    publisher = UsePublisher(root, entries, horizon=2)
    publisher.reach(entries[1])
    ready.set()
    signal.pause()


def test_a_killed_publisher_is_ignored_and_cleaned(tmp_path: Any) -> None:
    """K32: a live publisher in another process is read; once SIGKILLed, its lock is gone with
    it, so the next reader ignores its list and removes its files."""
    cache = ShardCache(str(tmp_path), 4 * SIZE)
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=_publish_and_wait, args=(cache.root, ["e-a", "e-b", "e-c"], ready))
    process.start()
    try:
        assert ready.wait(60)
        uses = read_next_uses(cache.root)
        assert uses.distance("e-c") == 1 and uses.distance("e-a") == float("inf")
        assert uses.protected("e-c")
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
    assert read_next_uses(cache.root).consumers == []
    assert os.listdir(os.path.join(cache.root, USES_DIR)) == []


def test_a_publisher_removes_its_files_on_close(tmp_path: Any) -> None:
    cache = ShardCache(str(tmp_path), SIZE)
    publisher = UsePublisher(cache.root, ["e-a"], horizon=1)
    assert len(os.listdir(os.path.join(cache.root, USES_DIR))) == 2
    publisher.close()
    assert os.listdir(os.path.join(cache.root, USES_DIR)) == []


def test_a_planted_uses_link_is_never_followed(tmp_path: Any) -> None:
    """K13 + K32: ``uses`` made a link to another folder: nothing there is read or removed."""
    cache = ShardCache(str(tmp_path / "cache"), SIZE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "1-x.keys").write_text('{"horizon": 1, "entries": ["e-a"]}')
    os.symlink(elsewhere, os.path.join(cache.root, USES_DIR))
    assert read_next_uses(cache.root).consumers == []
    publisher = UsePublisher(cache.root, ["e-a"], horizon=1)  # publishes nothing, fails nothing
    publisher.reach("e-a")
    publisher.close()
    assert sorted(os.listdir(elsewhere)) == ["1-x.keys"]
