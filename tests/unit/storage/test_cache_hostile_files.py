"""Small files another member of the group may have written into a shared cache dir — next-use
lists, their positions, sidecars — cost a reader bounded memory, are skipped when malformed
and never end a job or ``shardkit cache`` with a traceback (specs/cache.md K32, K40, K41)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from shardkit.cli import main
from shardkit.storage import CacheOptions, ShardCache, list_cache, next_use
from shardkit.storage.cache_layout import entry_name
from shardkit.storage.next_use import USES_DIR, UsePublisher, read_next_uses
from tests.helpers.s3 import memory_store

SIZE = 64
NAMES = [f"s{i}.bin" for i in range(4)]
DEEP = 100_000
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@contextlib.contextmanager
def planted_list(root: str, content: bytes | None, *, length: int | None = None) -> Iterator[str]:
    """``uses/<token>.keys`` holding ``content`` (or sparse, ``length`` bytes long), locked as a
    live publisher's is, for as long as the block runs."""
    folder = os.path.join(root, USES_DIR)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "4242-planted.keys")
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o664)
    try:
        if content is not None:
            os.write(fd, content)
        if length is not None:
            os.ftruncate(fd, length)
        fcntl.flock(fd, fcntl.LOCK_EX)  # "alive": a reader cannot take it and call it dead
        yield path
    finally:
        os.close(fd)


def _evict(cache: ShardCache, store: Any) -> None:
    """Three entries into room for two: the third open evicts (and reads ``uses/``)."""
    for name in NAMES[:3]:
        with cache.open(store, name, key=name, num_bytes=SIZE):
            pass


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from shardkit.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": REPO})


HOSTILE_LISTS = {
    "1e400": b'{"horizon": 1e400, "entries": []}',
    "-1e400": b'{"horizon": -1e400, "entries": ["e-a"]}',
    "nested": b'{"horizon": 1, "entries": ' + b"[" * DEEP + b"]" * DEEP + b"}",
    "nested-in-entry": b'{"horizon": 1, "entries": [' + b"[" * DEEP + b"]" * DEEP + b"]}",
}


@pytest.mark.parametrize("content", HOSTILE_LISTS.values(), ids=HOSTILE_LISTS.keys())
def test_a_malformed_live_list_is_skipped_by_eviction_and_cache_clear_k32_k41(
        tmp_path: Any, content: bytes, caplog: pytest.LogCaptureFixture) -> None:
    store = memory_store("hostile", NAMES, SIZE)
    cache = ShardCache(str(tmp_path), 2 * SIZE, CacheOptions(space_timeout=2))
    with planted_list(cache.root, content) as path:
        with caplog.at_level("DEBUG", logger="shardkit.storage.next_use"):
            _evict(cache, store)  # evicts by LRU, as with no publisher
        assert cache.stats.misses == 3
        assert any(path in record.getMessage() for record in caplog.records)  # K32: a debug log
        for argv in (["cache", "clear"], ["cache", "ls"]):
            done = _cli(*argv, "--cache-dir", str(tmp_path))
            assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert os.path.exists(path)  # its "publisher" lives: skipped, not removed


_PASS = """
import os, resource, sys
from shardkit.storage import ShardCache
from tests.helpers.s3 import memory_store
names = [f"s{i}.bin" for i in range(4)]
store = memory_store("rss", names, 64)
cache = ShardCache(sys.argv[1], 2 * 64)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(3):  # three eviction passes
    for name in names:
        with cache.open(store, name, key=name, num_bytes=64):
            pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, cache.stats.misses)
"""


def test_an_oversized_sparse_list_is_refused_unread_k41(tmp_path: Any) -> None:
    """A 1 GiB sparse ``.keys`` (no disk behind it) held by a "live publisher": the evicting
    process's peak memory stays flat (ru_maxrss, measured in a child) instead of growing by
    the file's size on every pass."""
    cache = ShardCache(str(tmp_path), 2 * SIZE)
    with planted_list(cache.root, None, length=1 << 30):
        done = subprocess.run([sys.executable, "-c", _PASS, str(tmp_path)], capture_output=True,
                              text=True, timeout=300, env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr
    grown_kib, misses = map(int, done.stdout.split())
    assert misses == 12  # 4 entries, room for 2, in order: every open misses
    assert grown_kib < 64 * 1024, f"peak RSS grew by {grown_kib} KiB during the eviction passes"


def test_a_planted_keys_new_never_gets_a_live_publishers_files_deleted_k41(tmp_path: Any) -> None:
    """Another member plants ``<live token>.keys.new``, unlocked: a reader takes its lock and
    removes that file alone — the live publisher's list and position stay, and are used."""
    cache = ShardCache(str(tmp_path), 4 * SIZE)
    publisher = UsePublisher(cache.root, ["e-a", "e-b", "e-c"], horizon=1)
    try:
        folder = os.path.join(cache.root, USES_DIR)
        (live,) = [name for name in os.listdir(folder) if name.endswith(".keys")]
        token = live[: -len(".keys")]
        planted = os.path.join(folder, token + ".keys.new")
        with open(planted, "w") as fh:
            fh.write("{}")
        publisher.reach("e-b")
        uses = read_next_uses(cache.root)
        assert sorted(os.listdir(folder)) == [token + ".keys", token + ".pos"]  # only the plant went
        assert uses.distance("e-c") == 1 and uses.protected("e-b")
        assert read_next_uses(cache.root).distance("e-c") == 1  # and on the next pass
    finally:
        publisher.close()
    assert os.listdir(os.path.join(cache.root, USES_DIR)) == []


def test_a_long_order_is_published_as_the_prefix_a_reader_accepts_k41(tmp_path: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(next_use, "MAX_LIST_ENTRIES", 10)
    cache = ShardCache(str(tmp_path), 4 * SIZE)
    entries = [f"e-{i}" for i in range(25)]
    publisher = UsePublisher(cache.root, entries, horizon=2)
    try:
        publisher.reach("e-0")
        uses = read_next_uses(cache.root)
        assert uses.distance("e-9") == 9 and uses.distance("e-10") == float("inf")
        publisher.reach("e-20")  # past the published prefix: nothing it listed is ahead
        assert read_next_uses(cache.root).distance("e-9") == float("inf")
    finally:
        publisher.close()


def test_one_pass_takes_at_most_max_pass_entries_from_all_lists_k41(tmp_path: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(next_use, "MAX_PASS_ENTRIES", 5)
    cache = ShardCache(str(tmp_path), 4 * SIZE)
    first = UsePublisher(cache.root, ["e-a", "e-b", "e-c"], horizon=1)
    second = UsePublisher(cache.root, ["e-x", "e-y", "e-z"], horizon=1)
    try:
        assert len(read_next_uses(cache.root).consumers) == 1  # 3 + 3 > 5: one list is skipped
    finally:
        first.close()
        second.close()


def test_one_pass_reads_at_most_max_pass_bytes_of_new_lists_k41(tmp_path: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A list parsed once costs no bytes again: the second pass reads the list the first left."""
    cache = ShardCache(str(tmp_path), 4 * SIZE)
    first = UsePublisher(cache.root, ["e-a", "e-b", "e-c"], horizon=1)
    second = UsePublisher(cache.root, ["e-x", "e-y", "e-z"], horizon=1)
    size = max(os.path.getsize(os.path.join(cache.root, USES_DIR, name))
               for name in os.listdir(os.path.join(cache.root, USES_DIR)) if name.endswith(".keys"))
    monkeypatch.setattr(next_use, "MAX_PASS_BYTES", size + 1)
    try:
        assert len(read_next_uses(cache.root).consumers) == 1
        assert len(read_next_uses(cache.root).consumers) == 2
        monkeypatch.setattr(next_use, "MAX_PASS_FILES", 1)
        assert len(read_next_uses(cache.root).consumers) == 1
    finally:
        first.close()
        second.close()


def test_a_deeply_nested_sidecar_does_not_break_cache_ls_k40(tmp_path: Any,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A 60 KB sidecar of nested lists (under the 64 KiB cap, so it is parsed): ``cache ls``
    lists the entry with the key its name encodes; fields of the wrong type are dropped."""
    store = memory_store("sidecar", NAMES, SIZE)
    cache = ShardCache(str(tmp_path), 4 * SIZE)
    for name in NAMES[:2]:
        with cache.open(store, name, key=name, num_bytes=SIZE):
            pass
    meta = os.path.join(cache.root, entry_name(NAMES[0]) + ".json")
    with open(meta, "wb") as fh:
        fh.write(b'{"key": ' + b"[" * 30_000 + b"]" * 30_000 + b"}")
    other = os.path.join(cache.root, entry_name(NAMES[1]) + ".json")
    with open(other, "w") as fh:
        json.dump({"key": {"a": 1}, "url": 5, "dataset": "ds", "size": True}, fh)
    rows = {row["path"]: row for row in list_cache(str(tmp_path))}
    assert sorted(row["key"] for row in rows.values()) == sorted(NAMES[:2])
    assert rows[os.path.join(cache.root, entry_name(NAMES[1]) + ".data")]["dataset"] == "ds"
    assert main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    assert NAMES[0] in capsys.readouterr().out


def test_a_lock_file_holding_anything_but_a_pid_names_no_holder_k40(tmp_path: Any) -> None:
    from shardkit.storage.locks import FileLock

    path = str(tmp_path / "x.lock")
    for text, pid in ((b"1234\n", 1234), (b"-5\n", None), (b"9" * 40, None), (b"12abc", None), (b"", None)):
        with open(path, "wb") as fh:
            fh.write(text)
        assert FileLock(path).holder_pid() == pid
    os.truncate(path, 1 << 40)  # sparse, 1 TiB long: refused by its length, never read
    assert FileLock(path).holder_pid() is None
