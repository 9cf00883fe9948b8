"""``shardkit pack --engine ray`` and ``shardkit.ray.write`` on a local 2-CPU Ray instance.

Checks specs/ray-packing.md: same samples as the local engine (Y4), one verified manifest (Y1),
deterministic names and manifest on rerun (Y2), retried tasks and orphans (Y3), bad records
(Y5), S3 output. Exactly-once: every id read back once through ``open_dataset(...).samples()``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardkit.errors import SourceError
from shardkit.read import open_dataset
from shardkit.read.tokens.lengths import document_lengths
from shardkit.read.verify import verify_dataset
from shardkit.write.pack import PackOptions, pack
from tests.integration.ray.conftest import ray_address

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    # Ray Data's DataContext warns about its own deprecated settings when copied.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]

SMALL = {"shard_size": "4KiB", "block_size": "1KiB", "shuffle": None}


# ---- helpers --------------------------------------------------------------------------------
def canonical(value: Any) -> Any:
    """A hashable, order-preserving form of a sample value (arrays keep dtype and shape)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(canonical(v) for v in value))
    return (type(value).__name__, value)


def sample_multiset(path: str, storage_options: dict[str, Any] | None = None) -> Counter[Any]:
    return Counter(canonical(s) for s in open_dataset(path, storage_options).samples())


def assert_verified(path: str, storage_options: dict[str, Any] | None = None) -> None:
    report = verify_dataset(open_dataset(path, storage_options))
    assert report.ok, report.to_dict()


def shardkit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from shardkit.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).parents[3],
    )


def make_jsonl(root: Path, bad_line: int | None = None) -> Path:
    root.mkdir()
    for f in range(2):
        with open(root / f"part{f}.jsonl", "w") as fh:
            for i in range(60):
                if bad_line is not None and (f, i) == (1, bad_line - 1):
                    fh.write("{not json\n")
                    continue
                row = {"id": f * 60 + i, "tokens": list(range(i % 9)), "text": "w" * (i % 13)}
                fh.write(json.dumps(row) + "\n")
    return root


def make_files(root: Path) -> Path:
    for i in range(30):
        folder = root / ("cat" if i % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / f"{i:04d}.npy", np.arange(i, dtype=np.float32).reshape(-1, 1))
        (folder / f"{i:04d}.txt").write_text(f"caption {i}")
        (folder / f"{i:04d}.cls").write_text(str(i % 3))
    return root


def make_parquet(root: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir()
    for f in range(2):
        ids = list(range(f * 50, f * 50 + 50))
        table = pa.table({
            "id": ids,
            "tokens": pa.array([list(range(i % 11)) for i in ids], pa.list_(pa.int32())),
            "text": [f"row {i}" for i in ids],
            "score": [i / 7 for i in ids],
        })
        pq.write_table(table, root / f"p{f}.parquet", row_group_size=20)
    return root


def make_wds(root: Path) -> Path:
    root.mkdir()
    for f in range(2):
        with tarfile.open(root / f"shard-{f}.tar", "w") as tar:
            for i in range(25):
                key = f"s{f}_{i:04d}"
                buf = io.BytesIO()
                np.save(buf, np.full(i + 1, i, dtype=np.int16))
                for ext, data in (("npy", buf.getvalue()), ("cls", str(i).encode()),
                                  ("json", json.dumps({"i": i}).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return root


def pack_ray(src: Path, out: Path, **options: Any) -> Any:
    from shardkit.write.ray.engine import pack_with_ray

    return pack_with_ray(str(src), str(out), PackOptions(**{**SMALL, **options}), progress=False)


# ---- engine equivalence ---------------------------------------------------------------------
def test_cli_ray_equals_local_jsonl(ray_cluster: Any, tmp_path: Path) -> None:
    src = make_jsonl(tmp_path / "raw")
    ray_out, local_out = tmp_path / "ray", tmp_path / "local"
    sizes = ["--shard-size", "4KiB", "--block-size", "1KiB"]
    done = shardkit_cli("pack", str(src), str(ray_out), "--engine", "ray",
                        "--address", ray_address(ray_cluster), "--json", *sizes)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["num_samples"] == 120 and summary["num_shards"] >= 2
    assert shardkit_cli("pack", str(src), str(local_out), "--no-progress", "--no-shuffle", *sizes).returncode == 0
    for out in (ray_out, local_out):
        checked = shardkit_cli("verify", str(out), "--no-progress")
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert sample_multiset(str(ray_out)) == sample_multiset(str(local_out))
    names = [s.name for s in open_dataset(str(ray_out)).manifest.shards]
    assert names == sorted(names) and all(n.startswith("shards/part-") for n in names)


@pytest.mark.parametrize("fmt, make, options", [
    ("files", make_files, {"label_from_dir": True}),
    ("parquet", make_parquet, {"layout": "rows"}),
    ("wds", make_wds, {}),
])
def test_ray_equals_local(ray_cluster: Any, tmp_path: Path, fmt: str, make: Any,
                          options: dict[str, Any]) -> None:
    src = make(tmp_path / "raw")
    summary = pack_ray(src, tmp_path / "ray", **options)
    local = pack(str(src), str(tmp_path / "local"), PackOptions(**{**SMALL, **options}))
    assert summary.num_samples == local.num_samples
    if options.get("layout") == "rows":  # column blocks' sizes depend on where blocks are cut
        assert summary.raw_bytes == local.raw_bytes
    assert_verified(str(tmp_path / "ray"))
    assert sample_multiset(str(tmp_path / "ray")) == sample_multiset(str(tmp_path / "local"))
    ray_manifest = open_dataset(str(tmp_path / "ray")).manifest
    local_manifest = open_dataset(str(tmp_path / "local")).manifest
    assert ray_manifest.schema == local_manifest.schema
    assert ray_manifest.metadata == local_manifest.metadata
    if fmt != "files":  # one task per input file
        assert summary.num_tasks == 2


# ---- shardkit.ray.write ---------------------------------------------------------------------
def token_rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "tokens": np.arange(i % 17 + 1, dtype=np.int32) * i, "text": f"t{i}"}
            for i in range(n)]


def test_write_dataset_with_arrays_and_rerun(ray_cluster: Any, tmp_path: Path) -> None:
    import shardkit.ray

    out = str(tmp_path / "ds")
    ds = ray_cluster.data.from_items(token_rows(300), override_num_blocks=5)
    first = shardkit.ray.write(ds, out, shard_size="2KiB", block_size="512B")
    manifest_bytes = (tmp_path / "ds" / "manifest.json").read_bytes()
    samples = list(open_dataset(out).samples())
    assert sorted(s["id"] for s in samples) == list(range(300))
    by_id = {s["id"]: s for s in samples}
    np.testing.assert_array_equal(by_id[20]["tokens"], np.arange(4, dtype=np.int32) * 20)
    assert by_id[20]["tokens"].dtype == np.int32 and by_id[7]["text"] == "t7"
    assert_verified(out)
    dataset = open_dataset(out)  # M12: the tasks' length indexes, joined in shard order
    assert [e.field for e in dataset.manifest.lengths] == ["tokens"]
    assert document_lengths(dataset, "tokens").tolist() == [len(s["tokens"]) for s in samples]

    with pytest.raises(FileExistsError):
        shardkit.ray.write(ds, out, shard_size="2KiB", block_size="512B")
    again = shardkit.ray.write(ds, out, shard_size="2KiB", block_size="512B", overwrite=True)
    assert again.fingerprint == first.fingerprint
    assert (tmp_path / "ds" / "manifest.json").read_bytes() == manifest_bytes


def test_write_range_fixed_shape_tensors(ray_cluster: Any, tmp_path: Path) -> None:
    import shardkit.ray

    ds = ray_cluster.data.range(200, override_num_blocks=4).map(
        lambda row: {"id": row["id"], "x": np.full((2, 3), row["id"], dtype=np.float16)})
    summary = shardkit.ray.write(ds, str(tmp_path / "ds"), shard_size="1KiB")
    assert summary.num_samples == 200
    samples = list(open_dataset(str(tmp_path / "ds")).samples())
    assert Counter(s["id"] for s in samples) == Counter(range(200))
    assert all(s["x"].shape == (2, 3) and s["x"].dtype == np.float16 for s in samples)
    assert all(float(s["x"][1, 2]) == np.float16(s["id"]) for s in samples)
    manifest = open_dataset(str(tmp_path / "ds")).manifest
    assert manifest.order == {"shuffled": False}  # M9: every writer records its order
    assert len(manifest.shards) > 4  # I15: 1 KiB shards of small blocks, not one 1 MiB block per task


def test_retried_task_and_orphans_leave_no_duplicates(ray_cluster: Any, tmp_path: Path) -> None:
    """A worker killed mid-task is retried by Ray; stale part files are deleted as orphans."""
    from shardkit.write.ray.engine import write_dataset
    from shardkit.write.ray.rows import DatasetRows

    marker = str(tmp_path / "killed-once")

    class DieOnce(DatasetRows):  # local class: pickled by value to the workers
        def sample(self, raw: Any) -> dict[str, Any]:
            if raw["id"] == 150 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)  # the worker process dies after writing some shards of its part
            return dict(raw)

    out = tmp_path / "ds"
    (out / "shards").mkdir(parents=True)
    (out / "shards" / "part-00099-0000.sks").write_bytes(b"left by an older run")
    ds = ray_cluster.data.from_items(token_rows(200), override_num_blocks=2)
    options = PackOptions(shard_size="1KiB", block_size="256B")
    summary = write_dataset(ds, str(out), options, DieOnce(), progress=False)
    assert os.path.exists(marker)
    assert summary.deleted == ["shards/part-00099-0000.sks"]
    ids = [s["id"] for s in open_dataset(str(out)).samples()]
    assert sorted(ids) == list(range(200))
    manifest = open_dataset(str(out)).manifest
    listed = {s.name for s in manifest.shards} | {e.name for e in manifest.lengths}
    assert set(os.listdir(out / "shards")) == {n.split("/", 1)[1] for n in listed}
    assert_verified(str(out))


# ---- bad records ----------------------------------------------------------------------------
def test_bad_record_fails_naming_it(ray_cluster: Any, tmp_path: Path) -> None:
    src = make_jsonl(tmp_path / "raw", bad_line=17)
    with pytest.raises(SourceError, match=r"part1\.jsonl:17: not valid JSON"):
        pack_ray(src, tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not list((tmp_path / "out").rglob("*.sks"))


def test_skip_bad_lists_the_record(ray_cluster: Any, tmp_path: Path) -> None:
    src = make_jsonl(tmp_path / "raw", bad_line=17)
    summary = pack_ray(src, tmp_path / "out", skip_bad=True)
    local = pack(str(src), str(tmp_path / "local"), PackOptions(**SMALL, skip_bad=True))
    assert summary.num_samples == 119
    assert [s["origin"] for s in summary.skipped] == [str(src / "part1.jsonl") + ":17"]
    manifest = open_dataset(str(tmp_path / "out")).manifest
    assert manifest.metadata["skipped"] == summary.skipped
    assert summary.skipped[0]["error"] == local.skipped[0]["error"]
    assert sample_multiset(str(tmp_path / "out")) == sample_multiset(str(tmp_path / "local"))


def test_unencodable_row_is_named(ray_cluster: Any, tmp_path: Path) -> None:
    import shardkit.ray

    class Opaque:  # no msgpack encoding: Ray keeps it as a pickled Python object column
        pass

    rows = [{"id": i, "value": Opaque() if i == 5 else float(i)} for i in range(10)]
    ds = ray_cluster.data.from_items(rows, override_num_blocks=2)
    with pytest.raises(SourceError, match=r"task 1: row 0 \(id=5\): .*Opaque"):
        shardkit.ray.write(ds, str(tmp_path / "out"))
    assert not (tmp_path / "out" / "manifest.json").exists()


# ---- S3 -------------------------------------------------------------------------------------
@pytest.mark.s3
def test_write_to_s3(ray_cluster: Any, s3_bucket: tuple[str, dict[str, Any]]) -> None:
    import shardkit.ray

    bucket, storage_options = s3_bucket
    url = f"{bucket}/tokens"
    ds = ray_cluster.data.from_items(token_rows(150), override_num_blocks=3)
    summary = shardkit.ray.write(ds, url, shard_size="2KiB", storage_options=storage_options)
    assert summary.num_samples == 150 and summary.num_shards >= 3
    ids = [s["id"] for s in open_dataset(url, storage_options).samples()]
    assert sorted(ids) == list(range(150))
    assert_verified(url, storage_options)


def test_ray_packed_dataset_streams_exactly_once(ray_cluster: Any, tmp_path: Path) -> None:
    """G2 on a Ray-packed dataset: ShardLoader with 2 workers, both tails, every id once."""
    import shardkit as sk
    import shardkit.ray

    out = str(tmp_path / "ds")
    shardkit.ray.write(ray_cluster.data.from_items(token_rows(301), override_num_blocks=4), out,
                       shard_size="2KiB", block_size="512B")
    for tail in ("drop", "pad"):
        loader = sk.ShardLoader(sk.StreamingDataset(out, batch_size=8, tail=tail), num_workers=2)
        ids = [i for b in loader for i, p in zip(b["id"].tolist(),
               b["_padded"].tolist() if tail == "pad" else [False] * 8, strict=True) if not p]
        assert len(ids) == len(set(ids)) and (len(ids) == 301 if tail == "pad" else 301 - len(ids) < 8)
