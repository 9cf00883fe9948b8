"""A shared cache dir where another member planted links and special files (specs/cache.md
K13–K14): every cache operation leaves the files they point at untouched — content, mode and
times — and a planted lock fails with a clear ``CacheError``, never a hang."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterator

import pytest

from shardkit.cli.cache_cmd import warm
from shardkit.errors import CacheError, CorruptShardError
from shardkit.storage import CacheItem, CacheOptions, ShardCache, Store, clear_cache, list_cache
from shardkit.storage.cache_layout import SPACE_LOCK, Entry, entry_name
from tests.helpers.s3 import memory_store

SIZE = 4096
FAST = CacheOptions(space_timeout=0.3, lock_timeout=5, poll_interval=0.02, chunk_bytes=1024)
SECRET = bytes(range(256)) * (SIZE // 256)  # the victim has the size of a shard: no size hint


@pytest.fixture
def remote() -> Store:
    return memory_store("planted", [f"shards/{i}.shard" for i in range(6)], SIZE)


@pytest.fixture
def victim(tmp_path: object) -> Iterator[str]:
    """Another file of the user running the job; the test checks it is never touched."""
    path = os.path.join(str(tmp_path), "victim")
    with open(path, "wb") as fh:
        fh.write(SECRET)
    os.chmod(path, 0o600)
    os.utime(path, (1_000_000, 1_000_000))
    before = _snapshot(path)
    yield path
    assert _snapshot(path) == before, f"{path} was modified through a planted file"


def _snapshot(path: str) -> tuple[bytes, int, float]:
    st = os.stat(path)
    with open(path, "rb") as fh:
        return fh.read(), stat.S_IMODE(st.st_mode), st.st_mtime


def item(index: int) -> CacheItem:
    def verify(path: str) -> None:
        with open(path, "rb") as fh:
            if fh.read() != bytes([index]) * SIZE:
                raise CorruptShardError(f"{path}: not shard {index}")

    return CacheItem(f"shards/{index}.shard", f"fp/{index}", SIZE, verify)


def lease(cache: ShardCache, store: Store, index: int) -> str:
    one = item(index)
    with cache.open(store, one.name, key=one.key, num_bytes=SIZE, verify=one.verify) as path:
        st = os.lstat(path)
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1
        with open(path, "rb") as fh:
            assert fh.read() == bytes([index]) * SIZE
        return path


def every_operation(cache: ShardCache, store: Store) -> list[str]:
    """Download, hit, evict (6 entries in a 3-entry cache), warm, ls, clear; the errors met."""
    errors = []
    steps: list[Callable[[], object]] = [
        *(lambda i=i: lease(cache, store, i) for i in (0, 0, 1, 2, 3, 4, 5)),
        lambda: warm(cache, store, [item(i) for i in range(3)], progress=False),
        lambda: list_cache(cache.cache_dir),
        lambda: clear_cache(cache.cache_dir),
    ]
    for step in steps:
        try:
            step()
        except CacheError as exc:
            errors.append(str(exc))
    return errors


def plant(kind: str, target: str, path: str) -> None:
    if kind == "symlink":
        os.symlink(target, path)
    elif kind == "hardlink":
        os.link(target, path)
    else:
        os.mkfifo(path)


ENTRY_FILES = {"lock": ".lock", "data": ".data", "meta": ".json"}


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo"])
@pytest.mark.parametrize("where", ["lock", "data", "meta", "space", "other-entry"])
def test_planted_files_never_reach_their_target_k13(remote: Store, victim: str, tmp_path: object,
                                                     kind: str, where: str) -> None:
    cache = ShardCache(os.path.join(str(tmp_path), "cache"), 3 * SIZE, FAST)
    if where == "space":
        paths = [os.path.join(cache.root, SPACE_LOCK)]
    elif where == "other-entry":  # an entry no job asks for: only eviction, ls and clear see it
        paths = [os.path.join(cache.root, entry_name("fp/x") + s) for s in (".data", ".lock", ".json")]
    else:
        paths = [os.path.join(cache.root, entry_name("fp/0") + ENTRY_FILES[where])]
    for path in paths:
        plant(kind, victim, path)
    errors = every_operation(cache, remote)
    planted_lock = where in ("space", "lock") and kind != "hardlink"
    if planted_lock:  # refused with a message naming the planted path
        assert errors and all(paths[0] in e for e in errors), errors
        assert any("symbolic link" in e or "not a regular file" in e for e in errors)
    else:
        assert errors == []


def test_planted_temp_names_are_never_opened_k13(remote: Store, victim: str, tmp_path: object,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Temp names are unpredictable (pid + random); even a guessed one is created O_EXCL."""
    cache = ShardCache(os.path.join(str(tmp_path), "cache"), 3 * SIZE, FAST)
    guessed = os.path.join(cache.root, "e-guessed.tmp-1-abc")
    os.symlink(victim, guessed)
    os.symlink(victim, guessed + ".meta")
    monkeypatch.setattr(Entry, "new_temp", lambda self: guessed)
    with pytest.raises(CacheError, match="e-guessed.tmp-1-abc"):
        lease(cache, remote, 0)


def test_a_linked_layout_folder_is_refused_k14(victim: str, tmp_path: object) -> None:
    elsewhere = os.path.join(str(tmp_path), "elsewhere")
    os.mkdir(elsewhere, 0o700)
    cache_dir = os.path.join(str(tmp_path), "cache")
    os.mkdir(cache_dir)
    os.symlink(elsewhere, os.path.join(cache_dir, "v1"))
    with pytest.raises(CacheError, match="v1 is not a folder"):
        ShardCache(cache_dir, 3 * SIZE, FAST)
    assert os.listdir(elsewhere) == [] and stat.S_IMODE(os.stat(elsewhere).st_mode) == 0o700


def test_the_user_may_name_a_cache_dir_through_a_link(remote: Store, tmp_path: object) -> None:
    real = os.path.join(str(tmp_path), "nvme")
    os.mkdir(real)
    os.symlink(real, os.path.join(str(tmp_path), "cache"))
    cache = ShardCache(os.path.join(str(tmp_path), "cache"), 3 * SIZE, FAST)
    lease(cache, remote, 1)
    assert os.listdir(os.path.join(real, "v1"))


@pytest.mark.parametrize(("mode", "warns"), [(0o777, True), (0o1777, False), (0o2770, False)])
def test_a_world_writable_cache_dir_without_sticky_bit_is_warned_about_k14(
        tmp_path: object, caplog: pytest.LogCaptureFixture, mode: int, warns: bool) -> None:
    cache_dir = os.path.join(str(tmp_path), f"cache-{mode:o}")
    os.mkdir(cache_dir)
    os.chmod(cache_dir, mode)
    with caplog.at_level(logging.WARNING, logger="shardkit.storage.cache_files"):
        ShardCache(cache_dir, 3 * SIZE, FAST)
    warned = [r.getMessage() for r in caplog.records if "writable by every user" in r.getMessage()]
    assert bool(warned) == warns, warned
    if warns:
        assert cache_dir in warned[0] and "sticky" in warned[0]


def test_a_writer_of_the_reserved_temp_never_reaches_the_download_k46(tmp_path) -> None:
    """K46: whoever opened the reserved temp for writing while it was ``0666 & ~umask`` writes
    into a file no longer named there; the file at that name is private (0600) and keeps its size."""
    from shardkit.storage.cache_files import make_private, seal

    path = str(tmp_path / "e-x.tmp-1-abcd")
    with open(path, "wb") as fh:
        fh.truncate(64)
    os.chmod(path, 0o664)
    with open(path, "r+b") as intruder:
        mode = make_private(path, 64)
        intruder.write(b"forged")
        intruder.flush()
    st = os.lstat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 64 and mode == 0o444
    with open(path, "rb") as fh:
        assert fh.read() == bytes(64)
    seal(path, mode)
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o444
