"""Another member of the cache dir's group cannot make a job train on its samples (specs/cache.md,
"Sharing a cache dir": K44, K45, K46; specs/manifest.md M20): real attacks by one real Unix user
of the group on the job of another (tests/helpers/victim_job.py), which reads from the moto S3
server with a cache_dir.

Each forged dataset has the genuine one's shape (same shard names and sizes, raw blocks), so a
forged file fits any size check: only checks rooted in what the victim got from the store stop it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import xxhash

import shardkit as sk
from shardkit.format.manifest_companion import encode_companion
from shardkit.read import open_dataset
from shardkit.read.stream import cache_item
from shardkit.storage import open_store
from shardkit.storage.cache_layout import entry_name
from shardkit.write import output
from tests.helpers.forged import rebound_companion
from tests.helpers.group_members import Job, Member, readable_copy, shared_folder

pytestmark = pytest.mark.s3

GENUINE, FORGED = 1 << 20, 1 << 21  # ids: msgpack encodes both in 5 bytes, so shards keep their sizes
NUM_SAMPLES = 120
ALL_GENUINE = set(range(GENUINE, GENUINE + NUM_SAMPLES))


def _pack(out: str, base: int, options: dict[str, Any] | None = None) -> None:
    with sk.ShardWriter(out, shard_size="2KiB", block_size="512B", compression="none",
                        storage_options=options) as writer:
        for i in range(NUM_SAMPLES):
            writer.write({"id": base + i, "pad": bytes(40)})


def _data_path(cache_dir: str, key: str) -> str:
    return os.path.join(cache_dir, "v1", entry_name(key) + ".data")


class Scene:
    """A genuine dataset on S3 (with a companion), a forged one of its shape on disk, a group
    cache dir, the attacker, and the victim's job once started."""

    def __init__(self, url: str, options: dict[str, Any], forged: str, root: str,
                 victim: Member, attacker: Member) -> None:
        self.url, self.options, self.forged, self.attacker = url, options, forged, attacker
        self.victim = victim
        self.cache = shared_folder(root, "cache", attacker)
        self.stage = shared_folder(root, "stage", attacker)
        self.home = os.path.join(root, "home")
        os.mkdir(self.home)
        os.chown(self.home, victim.uid, victim.gid)
        self.jobs: list[Job] = []

    def start_victim(self, companion_min_bytes: int | None = None) -> Job:
        extra = [] if companion_min_bytes is None else [str(companion_min_bytes)]
        job = self.victim.start(self.home, self.url, self.cache, json.dumps(self.options), *extra)
        self.jobs.append(job)
        return job

    def plant_forged_shards(self) -> None:
        """The attacker puts the forged shards where a job reading the forged manifest looks."""
        forged = open_dataset(self.forged)
        for i in range(len(forged.manifest.shards)):
            source = readable_copy(self.stage, f"shard-{i}", self.forged_shard(i))
            self.attacker.plant(source, _data_path(self.cache, cache_item(forged, i).key))
        assert len(forged.manifest.shards) == len(open_dataset(self.url, self.options).manifest.shards)

    def forged_shard(self, index: int) -> bytes:
        info = open_dataset(self.forged).manifest.shards[index]
        with open(os.path.join(self.forged, info.name), "rb") as fh:
            return fh.read()


@pytest.fixture
def scene(s3_bucket: tuple[str, dict[str, Any]], group_members: tuple[Member, Member], shared_root: str,
          tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    url, options = f"{s3_bucket[0]}/ds", s3_bucket[1]
    monkeypatch.setattr(output, "COMPANION_MIN_BYTES", 1)  # a manifest.bin for the M20 attack
    _pack(url, GENUINE, options)
    _pack(str(tmp_path / "forged"), FORGED)
    made = Scene(url, options, str(tmp_path / "forged"), shared_root, *group_members)
    yield made
    for job in made.jobs:
        job.close()


def test_a_planted_manifest_entry_is_not_believed_k44(scene: Scene) -> None:
    """K44: the attacker plants ``e-manifest-<key of (url, ETag, size)>.data`` — a valid forged
    manifest padded to the real size — and the shards it names; the victim reads its own."""
    job = scene.start_victim()
    store = open_store(scene.url, scene.options)
    size, version = store.stat("manifest.json")
    with open(os.path.join(scene.forged, "manifest.json"), "rb") as fh:
        forged = fh.read()
    assert len(forged) <= size, "the forged manifest must fit in the genuine one's size"
    forged = forged + b" " * (size - len(forged))  # JSON allows trailing blanks
    digest = hashlib.sha256(f"{store.url}\0{version}\0{size}".encode()).hexdigest()[:32]
    scene.attacker.plant(readable_copy(scene.stage, "manifest", forged),
                         _data_path(scene.cache, f"manifest-{digest}"))
    scene.plant_forged_shards()
    report = job.epoch()
    assert "error" not in report, report
    assert set(report["ids"]) == ALL_GENUINE


def test_a_planted_companion_rebound_to_the_genuine_json_is_not_used_m20(scene: Scene) -> None:
    """M20: the attacker plants a forged ``manifest.bin`` entry that records the genuine JSON's
    xxh64 (its own trailer recomputed), and the shards it names; the victim reads its own."""
    job = scene.start_victim(companion_min_bytes=1)
    store = open_store(scene.url, scene.options)
    genuine_json = store.read("manifest.json")
    with open(os.path.join(scene.forged, "manifest.json"), "rb") as fh:
        forged = rebound_companion(encode_companion(fh.read()), genuine_json)
    assert len(forged) == store.size("manifest.bin"), "same shape, same companion size"
    key = f"manifest-bin-{xxhash.xxh64_hexdigest(genuine_json)}"
    scene.attacker.plant(readable_copy(scene.stage, "companion", forged), _data_path(scene.cache, key))
    scene.plant_forged_shards()
    report = job.epoch()
    assert "error" not in report, report
    assert set(report["ids"]) == ALL_GENUINE


def test_the_victims_entry_cannot_be_overwritten_in_place_k46(scene: Scene) -> None:
    """K46: between two epochs of the victim's running loader the attacker writes a same-shaped
    forged shard over the victim's published entry, in place: the file's mode refuses it, and
    the second epoch reads genuine samples."""
    job = scene.start_victim()
    first = job.epoch()
    assert "error" not in first and set(first["ids"]) == ALL_GENUINE, first
    target = _data_path(scene.cache, cache_item(open_dataset(scene.url, scene.options), 0).key)
    assert os.stat(target).st_uid == scene.victim.uid
    forged = scene.forged_shard(0)
    assert len(forged) == os.path.getsize(target)
    done = scene.attacker.overwrite_in_place(readable_copy(scene.stage, "shard", forged), target)
    second = job.epoch()
    assert "error" not in second and set(second["ids"]) == ALL_GENUINE, second
    assert done.returncode != 0 and "Permission denied" in done.stderr, done


def test_an_entry_its_owner_rewrites_in_place_never_yields_its_samples_k45(scene: Scene) -> None:
    """K45: the attacker owns the entry (it published it, with the genuine bytes), so no mode
    stops it from writing it in place between two epochs of the victim's running loader; the
    second epoch fails naming the block, and never yields a forged sample."""
    job = scene.start_victim()
    genuine = open_dataset(scene.url, scene.options)
    target = _data_path(scene.cache, cache_item(genuine, 0).key)
    info = genuine.manifest.shards[0]
    scene.attacker.plant(readable_copy(scene.stage, "genuine", genuine.store.read(info.name)), target)
    first = job.epoch()
    assert "error" not in first and set(first["ids"]) == ALL_GENUINE, first
    done = scene.attacker.overwrite_in_place(readable_copy(scene.stage, "shard", scene.forged_shard(0)), target)
    assert done.returncode == 0, done.stderr
    second = job.epoch()
    assert second.get("error") == "CorruptShardError" and "checksum mismatch" in second["message"], second
    assert set(second["ids"]) <= ALL_GENUINE
