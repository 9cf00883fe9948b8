"""ShardCache in one process, over an in-memory remote store (specs/cache.md K1–K9)."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from shardkit.errors import CacheError, CorruptShardError, NotFoundError
from shardkit.storage import CacheOptions, ShardCache, Store, clear_cache, list_cache, open_store
from shardkit.storage.cache_layout import SPACE_LOCK, entry_name
from shardkit.storage.locks import FileLock
from tests.helpers.modes import file_modes, umask
from tests.helpers.s3 import memory_store

SIZE = 50_000
FAST = CacheOptions(space_timeout=0.5, lock_timeout=10, poll_interval=0.02, chunk_bytes=16_384)


@pytest.fixture
def remote() -> Store:
    return memory_store("cache-test", [f"shards/{i}.shard" for i in range(6)], SIZE)


def payload(index: int) -> bytes:
    return bytes([index]) * SIZE


def checker(index: int):  # noqa: ANN201 - a verify callback
    def verify(path: str) -> None:
        with open(path, "rb") as fh:
            if fh.read() != payload(index):
                raise CorruptShardError(f"{path}: checksum mismatch")
    return verify


def lease(cache: ShardCache, store: Store, index: int, key: str | None = None):  # noqa: ANN201
    return cache.open(store, f"shards/{index}.shard", key=key or f"fp/{index}", num_bytes=SIZE,
                      verify=checker(index))


def read_file(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def cached_files(cache: ShardCache, suffix: str = ".data") -> list[str]:
    return sorted(f for f in os.listdir(cache.root) if f.endswith(suffix))


def test_entry_names_are_safe_and_distinct() -> None:
    keys = ["fp/a", "fp%2Fa", "../../etc/passwd", "fp/" + "x" * 500, "fp/" + "x" * 499 + "y"]
    names = [entry_name(k) for k in keys]
    assert len(set(names)) == len(keys)
    assert all("/" not in n and not n.startswith(".") and len(n) < 200 for n in names)


def test_first_open_downloads_then_hits(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 10 * SIZE, FAST)
    with lease(cache, remote, 1) as path:
        assert read_file(path) == payload(1)
        assert path.startswith(cache.root)
    with lease(cache, remote, 1) as again:
        assert again == path
    assert (cache.stats.misses, cache.stats.hits) == (1, 1)
    assert not [f for f in os.listdir(cache.root) if ".tmp-" in f]


def test_local_store_is_never_copied_c8(tmp_path: object) -> None:
    origin = os.path.join(str(tmp_path), "ds")
    store = open_store(origin)
    store.write_atomic("a.shard", b"x" * 10)
    cache = ShardCache(os.path.join(str(tmp_path), "cache"), 1, FAST)
    with cache.open(store, "a.shard", key="fp/a", num_bytes=10) as path:
        assert path == os.path.join(origin, "a.shard")
    assert clear_cache(cache.cache_dir) == (0, 0)
    assert os.path.exists(path)


def test_threads_download_once_c3(remote: Store, tmp_path: object) -> None:
    caches = [ShardCache(str(tmp_path), 10 * SIZE, FAST) for _ in range(8)]
    barrier = threading.Barrier(len(caches))
    results: list[bytes] = []

    def work(cache: ShardCache) -> None:
        barrier.wait()
        with lease(cache, remote, 2) as path:
            results.append(read_file(path))

    threads = [threading.Thread(target=work, args=(c,)) for c in caches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [payload(2)] * len(caches)
    assert sum(c.stats.misses for c in caches) == 1


def test_lru_eviction_keeps_within_limit_c6(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 3 * SIZE, FAST)
    for index in (0, 1, 2, 0, 3):  # 0 is re-used, so 1 is least recently used when 3 arrives
        with lease(cache, remote, index):
            pass
    assert cached_files(cache) == [entry_name(f"fp/{i}") + ".data" for i in (0, 2, 3)]


def test_eviction_skips_entries_in_use_c5(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 2 * SIZE, FAST)
    with lease(cache, remote, 0) as held:
        for index in (1, 2, 3):
            with lease(cache, remote, index):
                assert os.path.exists(held)
        assert read_file(held) == payload(0)


def test_no_room_while_everything_is_in_use_raises_c7(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 2 * SIZE, FAST)
    with lease(cache, remote, 0), lease(cache, remote, 1):
        with pytest.raises(CacheError) as info:
            with lease(cache, remote, 2):
                pass
    message = str(info.value)
    assert cache.root in message and f"{SIZE} bytes" in message and "in use" in message


def test_entry_larger_than_the_limit_fails_at_once(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), SIZE - 1, FAST)
    with pytest.raises(CacheError, match="can never fit"):
        with lease(cache, remote, 0):
            pass


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_cached_file_is_downloaded_again_c2(remote: Store, tmp_path: object,
                                                     damage: str) -> None:
    with lease(ShardCache(str(tmp_path), 10 * SIZE, FAST), remote, 4) as path:
        pass
    with open(path, "r+b") as fh:
        if damage == "flip":
            fh.write(b"\xff")
        else:
            fh.truncate(SIZE // 2)
    cache = ShardCache(str(tmp_path), 10 * SIZE, FAST)  # a new process: nothing memoised
    with lease(cache, remote, 4) as again:
        assert read_file(again) == payload(4)
    assert cache.stats.misses == 1


def test_persistent_verify_failure_is_a_clear_error(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 10 * SIZE, FAST)
    with pytest.raises(CorruptShardError) as info:
        with cache.open(remote, "shards/1.shard", key="fp/1", num_bytes=SIZE,
                        verify=checker(2)):
            pass
    assert any("shards/1.shard" in n and "3 times" in n for n in info.value.__notes__)
    assert cache.stats.redownloads == 3
    assert cached_files(cache) == []
    assert not [f for f in os.listdir(cache.root) if ".tmp-" in f]


def test_missing_object_fails_fast_and_leaves_nothing(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 10 * SIZE, FAST)
    with pytest.raises(NotFoundError, match="shards/9.shard"):
        with cache.open(remote, "shards/9.shard", key="fp/9", num_bytes=SIZE):
            pass
    assert not [f for f in os.listdir(cache.root) if ".tmp-" in f or f.endswith(".data")]


def test_stale_temp_of_a_dead_download_is_removed_c4(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 10 * SIZE, FAST)
    name = entry_name("fp/3")
    stale = os.path.join(cache.root, f"{name}.tmp-999999-deadbeef")
    with open(stale, "wb") as fh:
        fh.write(b"partial")
    with open(os.path.join(cache.root, name + ".lock"), "w") as fh:
        fh.write("999999\n")  # a dead holder's pid: flock is gone with it
    with lease(cache, remote, 3) as path:
        assert read_file(path) == payload(3)
    assert not os.path.exists(stale)


@pytest.mark.parametrize(("mask", "file_mode"), [(0o002, 0o664), (0o022, 0o644), (0o027, 0o640)])
def test_cache_files_get_0666_minus_the_umask_and_data_is_read_only_k15_k46(
        remote: Store, tmp_path: object, mask: int, file_mode: int) -> None:
    """K15: modes follow the umask; K46: a published data file has no write bit at all."""
    with umask(mask):
        cache = ShardCache(os.path.join(str(tmp_path), "cache"), 10 * SIZE, FAST)
        with lease(cache, remote, 0):
            pass
    modes = file_modes(cache.cache_dir)
    data = {path: mode for path, mode in modes.items() if path.endswith(".data")}
    assert data and set(data.values()) == {file_mode & 0o444}, modes
    assert set(modes.values()) - {file_mode & 0o444} == {file_mode}, modes
    for folder in (cache.cache_dir, cache.root):  # created by the cache: 0777 & ~umask, setgid
        assert stat.S_IMODE(os.stat(folder).st_mode) == (0o777 & ~mask) | stat.S_ISGID


def test_list_and_clear_skip_entries_in_use(remote: Store, tmp_path: object) -> None:
    cache = ShardCache(str(tmp_path), 10 * SIZE, FAST)
    for index in (0, 1):
        with lease(cache, remote, index):
            pass
    with lease(cache, remote, 2):
        rows = {row["key"]: row for row in list_cache(str(tmp_path))}
        assert set(rows) == {"fp/0", "fp/1", "fp/2"}
        assert rows["fp/2"]["in_use"] and not rows["fp/0"]["in_use"]
        assert rows["fp/0"]["dataset"] == remote.url and rows["fp/0"]["size"] == SIZE
        assert clear_cache(str(tmp_path), older_than_seconds=3600) == (0, 0)
        assert clear_cache(str(tmp_path)) == (2, 2 * SIZE)
    assert [row["key"] for row in list_cache(str(tmp_path))] == ["fp/2"]


def test_list_of_a_missing_cache_dir_is_empty(tmp_path: object) -> None:
    assert list_cache(os.path.join(str(tmp_path), "nope")) == []
    assert clear_cache(os.path.join(str(tmp_path), "nope")) == (0, 0)


def test_a_short_space_timeout_never_fails_a_reserve_queued_behind_the_space_lock_k7(
        remote: Store, tmp_path: object) -> None:
    """K7: ``space_timeout`` bounds waiting for *room*; waiting for ``.space.lock`` itself (held
    for milliseconds by each holder, for longer on a loaded machine) is bounded by
    ``lock_timeout``. Here the room is there; the lock is held 10x the space timeout."""
    cache = ShardCache(str(tmp_path), 10 * SIZE, CacheOptions(space_timeout=0.05, lock_timeout=60,
                                                                 poll_interval=0.02, chunk_bytes=16_384))
    holder = FileLock(os.path.join(cache.root, SPACE_LOCK))
    holder.acquire(True, 5, 5, "the test's hold")
    outcome: list[object] = []

    def download() -> None:
        try:
            with lease(cache, remote, 2) as path:
                outcome.append(read_file(path) == payload(2))
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    worker = threading.Thread(target=download)
    worker.start()
    threading.Event().wait(0.5)  # a hold longer than space_timeout; longer on a slow core is fine
    holder.release()
    worker.join(60)
    assert outcome == [True], outcome


def counting_checker(index: int, calls: list[str], ident: bool):  # noqa: ANN201 - a verify callback
    """``checker(index)`` that records each call and, with ``ident``, answers the identity of the
    file it read (``fstat`` of its descriptor), as the reader's checksum verifier does."""
    def verify(path: str) -> tuple[int, int, int] | None:
        calls.append(path)
        with open(path, "rb") as fh:
            if fh.read() != payload(index):
                raise CorruptShardError(f"{path}: checksum mismatch")
            st = os.fstat(fh.fileno())
        return (st.st_dev, st.st_ino, st.st_size) if ident else None
    return verify


@pytest.mark.parametrize("ident", [True, False])
def test_a_download_this_process_verified_is_not_verified_again_on_open_k2(
        remote: Store, tmp_path: object, ident: bool) -> None:
    """K2: a verifier that names the file it checked makes this process's own download count as
    verified (one hash per shard, not one after the download and one more on the first open);
    one that names nothing keeps the old rule: checked again once on the first hit."""
    cache = ShardCache(str(tmp_path), 10 * SIZE, FAST)
    calls: list[str] = []
    for _ in range(3):
        with cache.open(remote, "shards/3.shard", key="fp/3", num_bytes=SIZE,
                        verify=counting_checker(3, calls, ident)) as path:
            assert read_file(path) == payload(3)
    assert cache.stats.misses == 1
    assert len(calls) == (1 if ident else 2)  # the download's check (+ the first hit's without an identity)


def test_a_file_renamed_over_a_verified_entry_is_verified_again_k2(remote: Store, tmp_path: object) -> None:
    """K2: what counts as verified is the inode that was checked; another file renamed over the
    entry (a member of the cache's group replacing it) is checked anew, and a bad one fetched again."""
    cache = ShardCache(str(tmp_path), 10 * SIZE, FAST)
    calls: list[str] = []
    with cache.open(remote, "shards/2.shard", key="fp/2", num_bytes=SIZE,
                    verify=counting_checker(2, calls, True)) as path:
        pass
    forged = f"{path}.forged"
    with open(forged, "wb") as fh:
        fh.write(b"\x00" * SIZE)  # the right size, the wrong bytes
    os.replace(forged, path)
    with cache.open(remote, "shards/2.shard", key="fp/2", num_bytes=SIZE,
                    verify=counting_checker(2, calls, True)) as again:
        assert read_file(again) == payload(2)
    assert calls[0] != path and path in calls[1:]  # the download's check, then the forged file's
    assert len([c for c in calls if c != path]) == 2  # and the new download's
    assert cache.stats.misses == 2
