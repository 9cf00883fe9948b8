"""Pack-time shuffle on the Ray engine (specs/ray-packing.md Y7, specs/pack-shuffle.md PS6):
the same sample order, schema, metadata and ``order`` as the local engine for the same input and
seed, deterministic bytes across runs, on a local 2-CPU Ray instance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shardkit.read import open_dataset
from shardkit.write.pack import PackOptions, pack
from shardkit.write.shuffle import ShuffleOptions
from tests.integration.ray.conftest import ray_address
from tests.integration.ray.test_ray_pack import (
    assert_verified,
    canonical,
    make_files,
    make_jsonl,
    shardkit_cli,
)

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]

SIZES = {"shard_size": "2KiB", "block_size": "512B"}


def in_order(path: Path) -> list[Any]:
    return [canonical(s) for s in open_dataset(str(path)).samples()]


def pack_both(src: Path, tmp_path: Path, seed: int, **options: Any) -> tuple[Path, Path]:
    from shardkit.write.ray.engine import pack_with_ray

    opts = PackOptions(**SIZES, **options, shuffle=ShuffleOptions(seed=seed))
    ray_out, local_out = tmp_path / f"ray-{seed}", tmp_path / f"local-{seed}"
    pack_with_ray(str(src), str(ray_out), opts, progress=False)
    pack(str(src), str(local_out), opts)
    return ray_out, local_out


@pytest.mark.parametrize("make, options", [
    (lambda root: make_jsonl(root, bad_line=17), {"skip_bad": True}),  # numbering after skips
    (make_files, {"label_from_dir": True}),  # 30 file groups in one from_items block
])
def test_ray_shuffle_has_the_local_order(ray_cluster: Any, tmp_path: Path, make: Any,
                                         options: dict[str, Any]) -> None:
    src = make(tmp_path / "raw")
    ray_out, local_out = pack_both(src, tmp_path, 7, **options)
    assert_verified(str(ray_out))
    ray_samples, local_samples = in_order(ray_out), in_order(local_out)
    assert ray_samples == local_samples
    pack(str(src), str(tmp_path / "plain"), PackOptions(**SIZES, **options, shuffle=None))
    assert ray_samples != in_order(tmp_path / "plain")  # shuffled for real
    ray_manifest, local_manifest = (open_dataset(str(p)).manifest for p in (ray_out, local_out))
    assert ray_manifest.schema == local_manifest.schema
    assert ray_manifest.metadata == local_manifest.metadata  # skipped records too, in source order
    assert ray_manifest.order == local_manifest.order == {"shuffled": True, "method": "sort-by-key-v1",
                                                          "seed": 7}


def test_ray_shuffle_is_deterministic_and_seeded(ray_cluster: Any, tmp_path: Path) -> None:
    src = make_jsonl(tmp_path / "raw")
    sizes = ["--shard-size", "2KiB", "--block-size", "512B", "--no-progress"]
    outs = []
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        out = tmp_path / name
        done = shardkit_cli("pack", str(src), str(out), "--engine", "ray", "--seed", seed, "--json",
                            "--address", ray_address(ray_cluster), *sizes)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["num_tasks"] == 2  # one key range per input file
        outs.append(out)
    a, b, c = outs
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)  # identical bytes
    assert in_order(a) != in_order(c) and sorted(in_order(a)) == sorted(in_order(c))
    local = tmp_path / "local"
    assert shardkit_cli("pack", str(src), str(local), "--seed", "3", *sizes).returncode == 0
    assert in_order(a) == in_order(local)
