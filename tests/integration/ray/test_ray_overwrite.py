"""``--engine ray --overwrite`` keeps the old dataset until the new manifest is published
(specs/ray-packing.md Y1, shard-format.md W5), on a local 2-CPU Ray instance.

Failures are injected for real: a write task raises in the middle of the job after it staged
some parts, and the driver's store fails while it moves the staged parts to their final names
(after the commit point).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardkit.errors import SourceError
from shardkit.read import open_dataset
from shardkit.read.verify import verify_dataset
from shardkit.storage.local_store import LocalStore
from shardkit.write.output import STAGING_PREFIX
from shardkit.write.pack import PackOptions

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]

OPTIONS = {"shard_size": "1KiB", "block_size": "256B"}


def rows(n: int, tag: str) -> list[dict[str, Any]]:
    return [{"id": i, "tag": tag, "x": np.arange(i % 13 + 1, dtype=np.int32)} for i in range(n)]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def named_files(out: Path) -> set[str]:
    manifest = open_dataset(str(out)).manifest
    return {s.name for s in manifest.shards} | {e.name for e in manifest.lengths}


def readable(out: Path) -> list[tuple[int, str]]:
    dataset = open_dataset(str(out))
    report = verify_dataset(dataset)
    assert report.ok, report.to_dict()
    return sorted((s["id"], s["tag"]) for s in dataset.samples())


def old_dataset(ray: Any, out: Path) -> dict[str, bytes]:
    import shardkit.ray

    shardkit.ray.write(ray.data.from_items(rows(120, "old"), override_num_blocks=3), str(out), **OPTIONS)
    return files_under(out)


def test_task_failure_mid_overwrite_keeps_the_old_dataset(ray_cluster: Any, tmp_path: Path) -> None:
    from shardkit.write.ray.engine import write_dataset
    from shardkit.write.ray.rows import DatasetRows

    out = tmp_path / "ds"
    before = old_dataset(ray_cluster, out)
    seen = str(tmp_path / "staged-when-failing.json")

    class FailLate(DatasetRows):  # local class: pickled by value to the workers
        def sample(self, raw: Any) -> dict[str, Any]:
            if raw["id"] == 199:  # the last row of the last task, which has staged parts by now
                staged = sorted(str(p.relative_to(out)) for p in out.glob(f"{STAGING_PREFIX}*/*.sks"))
                with open(seen, "w") as fh:
                    json.dump(staged, fh)
                raise SourceError("injected failure")
            return dict(raw)

    ds = ray_cluster.data.from_items(rows(200, "new"), override_num_blocks=2)
    with pytest.raises(SourceError, match="injected failure"):
        write_dataset(ds, str(out), PackOptions(**OPTIONS, overwrite=True), FailLate(), progress=False)
    with open(seen) as fh:
        staged = json.load(fh)
    assert staged and all(name.startswith(f"{STAGING_PREFIX}a/part-") for name in staged)
    assert files_under(out) == before  # same manifest, same shards, nothing else
    assert readable(out) == [(i, "old") for i in range(120)]


def test_store_failure_after_the_commit_point_leaves_the_new_dataset(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shardkit.ray

    out = tmp_path / "ds"
    old_dataset(ray_cluster, out)
    copied: list[str] = []
    real_copy = LocalStore.copy

    def copy_then_fail(self: LocalStore, src: str, dst: str) -> None:
        if len(copied) == 2:  # the driver has moved two staged parts: fail the third
            raise OSError(f"injected failure copying {src}")
        real_copy(self, src, dst)
        copied.append(dst)

    monkeypatch.setattr(LocalStore, "copy", copy_then_fail)
    ds = ray_cluster.data.from_items(rows(200, "new"), override_num_blocks=2)
    with pytest.raises(OSError, match="injected failure"):
        shardkit.ray.write(ds, str(out), overwrite=True, **OPTIONS)
    monkeypatch.undo()
    assert readable(out) == [(i, "new") for i in range(200)]  # by its staged names
    named = named_files(out)  # shards and length index (M13)
    assert all(n.startswith(f"{STAGING_PREFIX}a/") for n in named) and len(named) > 2
    assert set(files_under(out)) == named | {"manifest.json"}  # no orphans, old or new

    again = shardkit.ray.write(ds, str(out), overwrite=True, **OPTIONS)  # staging folder -b/ is free
    assert again.num_samples == 200 and readable(out) == [(i, "new") for i in range(200)]
    names = named_files(out)
    assert all(n.startswith(("shards/part-", "shards/lengths-")) for n in names)
    assert set(files_under(out)) == names | {"manifest.json"}
    assert not [p for p in os.listdir(out) if p.startswith(STAGING_PREFIX)]
