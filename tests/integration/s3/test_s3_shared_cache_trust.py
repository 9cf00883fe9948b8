"""Another member of the cache dir's group cannot make a job train on its samples (specs/cache.md,
"Sharing a cache dir": K40, K41, K42; specs/manifest.md M20): real attacks, run as a second real
Unix user of the group against the victim's job reading from the moto S3 server with a cache_dir.

Each forged dataset has the genuine one's shape (same shard names and sizes, raw blocks), so a
forged file fits any size check: only checks rooted in what the victim got from the store stop it.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
import xxhash

import shardkit as sk
from shardkit.errors import CorruptShardError
from shardkit.format.manifest_companion import encode_companion
from shardkit.read import manifest_open, open_dataset
from shardkit.read.stream import cache_item
from shardkit.storage import ShardCache, open_store
from shardkit.storage.cache_layout import entry_name
from shardkit.write import output
from tests.helpers.forged import rebound_companion
from tests.helpers.modes import umask
from tests.helpers.unix_users import Member, readable_copy, shared_folder

pytestmark = pytest.mark.s3

GENUINE, FORGED = 1 << 20, 1 << 21  # ids: msgpack encodes both in 5 bytes, so shards keep their sizes
NUM_SAMPLES = 120


def _pack(out: str, base: int, options: dict[str, Any] | None = None, overwrite: bool = False) -> None:
    with sk.ShardWriter(out, shard_size="2KiB", block_size="512B", compression="none",
                        storage_options=options, overwrite=overwrite) as writer:
        for i in range(NUM_SAMPLES):
            writer.write({"id": base + i, "pad": bytes(40)})


def _ids(dataset: sk.StreamingDataset) -> set[int]:
    return {int(i) for batch in dataset for i in batch["id"].tolist()}


def _data_path(cache_dir: str, key: str) -> str:
    return os.path.join(cache_dir, "v1", entry_name(key) + ".data")


def _plant_forged_shards(member: Member, stage: str, cache_dir: str, forged_dir: str) -> None:
    """The member puts the forged dataset's shards where a job reading the forged manifest looks."""
    forged = open_dataset(forged_dir)
    for i, info in enumerate(forged.manifest.shards):
        with open(os.path.join(forged_dir, info.name), "rb") as fh:
            source = readable_copy(stage, f"shard-{i}", fh.read())
        member.plant(source, _data_path(cache_dir, cache_item(forged, i).key))


@pytest.fixture
def setup(s3_bucket: tuple[str, dict[str, Any]], group_member: Member, shared_root: str,
          tmp_path: Any) -> dict[str, Any]:
    """A genuine dataset on S3, a forged one of the same shape on disk, a group cache dir."""
    url, options = f"{s3_bucket[0]}/ds", s3_bucket[1]
    forged_dir = str(tmp_path / "forged")
    _pack(url, GENUINE, options)
    _pack(forged_dir, FORGED)
    cache_dir = shared_folder(shared_root, "cache", group_member)
    stage = shared_folder(shared_root, "stage", group_member)
    with umask(0o002):
        ShardCache(cache_dir, 1 << 30)  # the victim's job made v1/ (2775 under umask 002)
    return {"url": url, "options": options, "forged": forged_dir, "cache": cache_dir, "stage": stage,
            "member": group_member}


def _dataset(setup: dict[str, Any]) -> sk.StreamingDataset:
    return sk.StreamingDataset(setup["url"], batch_size=8, shuffle=False, tail="pad",
                               cache_dir=setup["cache"], storage_options=setup["options"])


def test_a_planted_manifest_entry_is_not_believed_k40(setup: dict[str, Any]) -> None:
    """K40: the member plants ``e-manifest-<key of (url, ETag, size)>.data`` — a valid forged
    manifest padded to the real size — and the shards it names; the victim reads its own."""
    member, stage, cache_dir = setup["member"], setup["stage"], setup["cache"]
    store = open_store(setup["url"], setup["options"])
    size, version = store.version("manifest.json")
    with open(os.path.join(setup["forged"], "manifest.json"), "rb") as fh:
        forged = fh.read()
    assert len(forged) <= size, "the forged manifest must fit in the genuine one's size"
    forged = forged + b" " * (size - len(forged))  # JSON allows trailing blanks
    digest = hashlib.sha256(f"{store.url}\0{version}\0{size}".encode()).hexdigest()[:32]
    member.plant(readable_copy(stage, "manifest", forged), _data_path(cache_dir, f"manifest-{digest}"))
    _plant_forged_shards(member, stage, cache_dir, setup["forged"])
    with umask(0o002):
        ids = _ids(_dataset(setup))
    assert ids == set(range(GENUINE, GENUINE + NUM_SAMPLES))


def test_a_planted_companion_rebound_to_the_genuine_json_is_not_used_m20(
        setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """M20: the member plants a forged ``manifest.bin`` entry that records the genuine JSON's
    xxh64 (its own trailer recomputed) and the shards it names; the victim reads its own."""
    monkeypatch.setattr(output, "COMPANION_MIN_BYTES", 1)
    monkeypatch.setattr(manifest_open, "COMPANION_MIN_BYTES", 1)
    member, stage, cache_dir = setup["member"], setup["stage"], setup["cache"]
    _pack(setup["url"], GENUINE, setup["options"], overwrite=True)  # again, now with a companion
    store = open_store(setup["url"], setup["options"])
    genuine_json = store.read("manifest.json")
    with open(os.path.join(setup["forged"], "manifest.json"), "rb") as fh:
        forged = rebound_companion(encode_companion(fh.read()), genuine_json)
    assert len(forged) == store.size("manifest.bin"), "same shape, same companion size"
    key = f"manifest-bin-{xxhash.xxh64_hexdigest(genuine_json)}"
    member.plant(readable_copy(stage, "companion", forged), _data_path(cache_dir, key))
    _plant_forged_shards(member, stage, cache_dir, setup["forged"])
    with umask(0o002):
        ids = _ids(_dataset(setup))
    assert ids == set(range(GENUINE, GENUINE + NUM_SAMPLES))


def _forged_shard_bytes(setup: dict[str, Any], index: int) -> bytes:
    info = open_dataset(setup["forged"]).manifest.shards[index]
    with open(os.path.join(setup["forged"], info.name), "rb") as fh:
        return fh.read()


def test_the_victims_entry_cannot_be_overwritten_in_place_k42(setup: dict[str, Any]) -> None:
    """K42: between two epochs of one running loader the member writes a same-shaped forged
    shard over the victim's published entry, in place: refused by the file's mode, and the
    second epoch reads genuine samples."""
    member, stage = setup["member"], setup["stage"]
    with umask(0o002):
        dataset = _dataset(setup)
        assert _ids(dataset) == set(range(GENUINE, GENUINE + NUM_SAMPLES))
        genuine = open_dataset(setup["url"], setup["options"])
        target = _data_path(setup["cache"], cache_item(genuine, 0).key)
        forged = _forged_shard_bytes(setup, 0)
        assert len(forged) == os.path.getsize(target)
        done = member.overwrite_in_place(readable_copy(stage, "shard", forged), target)
        second = _ids(dataset)
    assert second == set(range(GENUINE, GENUINE + NUM_SAMPLES))
    assert done.returncode != 0 and "Permission denied" in done.stderr, done


def test_an_entry_its_owner_rewrites_in_place_never_yields_its_samples_k41(setup: dict[str, Any]) -> None:
    """K41: the member owns the entry (it published it, with the genuine bytes), so no mode stops
    it from writing it in place between two epochs of the victim's running loader; the second
    epoch fails naming the block, and never yields a forged sample."""
    member, stage = setup["member"], setup["stage"]
    genuine = open_dataset(setup["url"], setup["options"])
    store = genuine.store
    target = _data_path(setup["cache"], cache_item(genuine, 0).key)
    info = genuine.manifest.shards[0]
    member.plant(readable_copy(stage, "genuine", store.read(info.name)), target)
    with umask(0o002):
        dataset = _dataset(setup)
        assert _ids(dataset) == set(range(GENUINE, GENUINE + NUM_SAMPLES))
        forged = _forged_shard_bytes(setup, 0)
        done = member.overwrite_in_place(readable_copy(stage, "shard", forged), target)
        assert done.returncode == 0, done.stderr
        seen: set[int] = set()
        with pytest.raises(CorruptShardError, match="checksum mismatch"):
            for batch in dataset:
                seen.update(int(i) for i in batch["id"].tolist())
    assert seen <= set(range(GENUINE, GENUINE + NUM_SAMPLES))
