"""A cache dir shared by two real Unix users of one group (specs/cache.md, "Sharing a cache
dir"; K43, K42): what one member leaves behind, by its umask or on purpose, never makes the
other's downloads fail."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

import pytest

from tests.helpers.unix_users import SharedGroup, shared_group

pytestmark = pytest.mark.slow

SIZE = 4096
_DOWNLOAD = f"""
import os, sys
from shardkit.storage import CacheOptions, ShardCache
from tests.helpers.s3 import memory_store
store = memory_store("users", ["a.bin"], {SIZE})
cache = ShardCache(sys.argv[1] if len(sys.argv) > 1 else CACHE, LIMIT, CacheOptions(space_timeout=0.5))
with cache.open(store, "a.bin", key="users/a.bin", num_bytes={SIZE}) as path:
    assert open(path, "rb").read() == bytes([0]) * {SIZE}
print("downloaded", cache.stats.misses)
"""


@pytest.fixture
def group() -> Iterator[SharedGroup]:
    with shared_group() as made:
        yield made


def _download(cache_dir: str, limit: int) -> str:
    return f"CACHE, LIMIT = {cache_dir!r}, {limit}\n" + _DOWNLOAD


def test_slot_files_of_a_member_with_umask_022_do_not_fail_the_others_downloads_k43(group: SharedGroup) -> None:
    """Alice (umask 022) made every budget slot: 0644, hers. Bob's download takes one read-only
    (flock needs no write permission) and succeeds; the slots still exclude each other."""
    cache_dir = os.path.join(group.folder, "cache")
    setup = group.bob.run(f"from shardkit.storage import ShardCache; ShardCache({cache_dir!r}, 1 << 20)")
    assert setup.returncode == 0, setup.stderr
    slots = os.path.join(cache_dir, "v1", ".slots")
    made = group.alice.run(f"from shardkit.storage.budget import NodeBudget\n"
                           f"print(NodeBudget({os.path.dirname(slots)!r}, 64).num_free())", umask=0o022)
    assert made.returncode == 0 and made.stdout.split() == ["64"], made.stderr
    for name in os.listdir(slots):
        st = os.stat(os.path.join(slots, name))
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (group.alice.uid, 0o644)  # the case of the issue

    done = group.bob.run(_download(cache_dir, 1 << 20))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["downloaded", "1"]
    exclusive = group.bob.run(
        f"from shardkit.storage.budget import NodeBudget\n"
        f"budget = NodeBudget({os.path.dirname(slots)!r}, 64)\n"
        f"held = [budget.try_acquire() for _ in range(64)]\n"
        f"print(all(fd is not None and fd >= 0 for fd in held), budget.try_acquire())")
    assert exclusive.returncode == 0, exclusive.stderr
    assert exclusive.stdout.split() == ["True", "None"]  # 64 read-only slots held, none left
    for name in os.listdir(slots):  # nothing was chmod-ed or replaced (K15)
        st = os.stat(os.path.join(slots, name))
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (group.alice.uid, 0o644)


def test_slots_nobody_may_open_leave_downloads_without_a_budget_k43(group: SharedGroup) -> None:
    """Bob (umask 002) made the cache dir; Alice (umask 077) then made the slots folder and
    every slot in it: Bob can open none of them. His download goes without the node's budget
    instead of failing or waiting for a slot."""
    cache_dir = os.path.join(group.folder, "cache")
    setup = group.bob.run(f"from shardkit.storage.cache_layout import ensure_root; ensure_root({cache_dir!r})")
    assert setup.returncode == 0, setup.stderr
    made = group.alice.run(f"from shardkit.storage import ShardCache\n"
                           f"print(ShardCache({cache_dir!r}, 1 << 20)._budget.num_free())", umask=0o077)
    assert made.returncode == 0 and made.stdout.split() == ["64"], made.stderr
    assert stat.S_IMODE(os.stat(os.path.join(cache_dir, "v1", ".slots")).st_mode) & 0o070 == 0
    done = group.bob.run(_download(cache_dir, 1 << 20))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["downloaded", "1"]
    assert "download slots" in done.stderr and "without the node's budget" in done.stderr


def test_a_sparse_entry_held_by_another_member_does_not_fill_the_cache_k42(group: SharedGroup) -> None:
    """Alice plants a 10 TiB sparse entry (no disk behind it) and holds it with a shared lock;
    Bob's download still finds room: the entry counts for the blocks it has, not its length."""
    cache_dir = os.path.join(group.folder, "cache")
    setup = group.bob.run(f"from shardkit.storage import ShardCache; ShardCache({cache_dir!r}, 1 << 20)")
    assert setup.returncode == 0, setup.stderr
    root = os.path.join(cache_dir, "v1")
    holder = group.alice.start(
        f"import fcntl, os, sys\n"
        f"fd = os.open({os.path.join(root, 'e-squat.data')!r}, os.O_CREAT | os.O_WRONLY, 0o664)\n"
        f"os.ftruncate(fd, 10 << 40)\n"
        f"lock = os.open({os.path.join(root, 'e-squat.lock')!r}, os.O_CREAT | os.O_RDWR, 0o664)\n"
        f"fcntl.flock(lock, fcntl.LOCK_SH)\n"
        f"print('held', flush=True)\n"
        f"sys.stdin.read()\n")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert os.stat(os.path.join(root, "e-squat.data")).st_size == 10 << 40
        done = group.bob.run(_download(cache_dir, 1 << 20))
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["downloaded", "1"]
        assert os.path.exists(os.path.join(root, "e-squat.data"))  # leased: never evicted (K5)
    finally:
        holder.communicate(timeout=30)


_EVICT = """
import sys
from shardkit.storage import CacheOptions, ShardCache
from tests.helpers.s3 import memory_store
names = ["a.bin", "b.bin", "c.bin"]
store = memory_store("evict", names, 64)
cache = ShardCache(sys.argv[1], 2 * 64, CacheOptions(space_timeout=0.5))
for name in names:  # room for two: the third evicts, reading uses/
    with cache.open(store, name, key=name, num_bytes=64):
        pass
print("misses", cache.stats.misses)
"""

_PUBLISH = """
import sys
from shardkit.storage import ShardCache
from shardkit.storage.next_use import UsePublisher
cache = ShardCache(sys.argv[1], 2 * 64)
publisher = UsePublisher(cache.root, ["e-x", "e-y"], horizon=1)
print(publisher._token, flush=True)
sys.stdin.read()
publisher.close()
"""


def test_another_members_malformed_live_list_does_not_kill_an_evicting_job_k41(group: SharedGroup) -> None:
    """Alice publishes `{"horizon": 1e400}` and keeps it locked as a live publisher would; Bob's
    job evicts past it (skipped, LRU) instead of dying with OverflowError."""
    cache_dir = os.path.join(group.folder, "cache")
    setup = group.bob.run(f"from shardkit.storage import ShardCache; ShardCache({cache_dir!r}, 1 << 20)")
    assert setup.returncode == 0, setup.stderr
    uses = os.path.join(cache_dir, "v1", "uses")
    holder = group.alice.start(
        f"import fcntl, os, sys\n"
        f"os.makedirs({uses!r}, exist_ok=True)\n"
        f"fd = os.open({os.path.join(uses, '1-alice.keys')!r}, os.O_CREAT | os.O_RDWR, 0o664)\n"
        f"os.write(fd, b'{{\"horizon\": 1e400, \"entries\": []}}')\n"
        f"fcntl.flock(fd, fcntl.LOCK_EX)\n"
        f"print('held', flush=True)\n"
        f"sys.stdin.read()\n")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held", holder.stderr
        done = group.bob.run(_EVICT, cache_dir)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["misses", "3"]
    finally:
        holder.communicate(timeout=30)


def test_a_keys_new_planted_by_another_member_never_removes_a_live_publishers_files_k41(
        group: SharedGroup) -> None:
    """Bob's consumer publishes its next uses; Alice plants `<Bob's token>.keys.new`, unlocked.
    Bob's evicting job removes the plant alone: his live publisher's list and position stay."""
    cache_dir = os.path.join(group.folder, "cache")
    publisher = group.bob.start(_PUBLISH, cache_dir)
    try:
        assert publisher.stdout is not None
        token = publisher.stdout.readline().strip()
        assert token, publisher.stderr
        uses = os.path.join(cache_dir, "v1", "uses")
        planted = os.path.join(uses, token + ".keys.new")
        made = group.alice.run(f"open({planted!r}, 'w').write('{{}}')")
        assert made.returncode == 0, made.stderr
        done = group.bob.run(_EVICT, cache_dir)
        assert done.returncode == 0, done.stderr
        assert sorted(os.listdir(uses)) == [token + ".keys", token + ".pos"]
    finally:
        publisher.communicate(timeout=30)
    assert os.listdir(uses) == []  # closed: the publisher removed its own files
