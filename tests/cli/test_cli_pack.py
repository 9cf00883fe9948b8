"""``shardkit pack`` from every source format, ``info``/``head``, determinism across workers and
SIGKILL during pack (specs/manifest.md W1–W3)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest

from shardkit.cli import main
from shardkit.read import open_dataset
from shardkit.read.verify import verify_dataset
from tests.helpers.files import read_tree
from tests.helpers.samples import assert_value_equal

SHARDKIT = [os.path.join(os.path.dirname(sys.executable), "shardkit")]


def pack(capsys, src, out, *extra: str) -> tuple[int, str]:
    # Source order, so tests can compare with their input (shuffled packs: tests/cli/test_cli_pack_shuffle.py).
    order = [] if "--shuffle" in extra else ["--no-shuffle"]
    code = main(["pack", str(src), str(out), "--no-progress", *order, *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def read_back(out) -> list[dict]:
    dataset = open_dataset(str(out))
    assert verify_dataset(dataset).ok
    return list(dataset.samples())


def write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


@pytest.mark.parametrize("flag", [(), ("--label-from-dir",)])
def test_an_image_folder_packs_one_image_field_and_a_label_from_its_class_folders(tmp_path, capsys, flag):
    """PI14, PI15: an ImageNet-style tree (class folders of .jpg, .JPEG and .png files) gives
    every sample ``image`` (the file's bytes) and ``label`` (the class folder's index in sorted
    order), with or without --label-from-dir; the schema has no optional field."""
    rng = np.random.default_rng(0)
    exts = ("jpg", "JPEG", "png")
    images = {f"{cls}/{i:03d}": rng.bytes(300) for cls in ("n02", "n01") for i in range(6)}
    for n, (key, data) in enumerate(images.items()):
        write(tmp_path / "raw" / f"{key}.{exts[n % 3]}", data)
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out", *flag)
    assert code == 0, text
    got = read_back(tmp_path / "out")
    assert [s["__key__"] for s in got] == sorted(images)
    for sample in got:
        assert set(sample) == {"__key__", "image", "label"}
        assert sample["image"] == images[sample["__key__"]]
        assert sample["label"] == {"n01": 0, "n02": 1}[sample["__key__"].split("/")[0]]
    manifest = open_dataset(str(tmp_path / "out")).manifest
    assert manifest.metadata["classes"] == {"n01": 0, "n02": 1}
    assert manifest.schema == {"__key__": {"type": "str"}, "image": {"type": "bytes"}, "label": {"type": "int"}}


def test_a_flat_image_folder_gives_one_image_field_and_no_label(tmp_path, capsys):
    """PI14: mixed extensions in one folder are still one ``image`` field; no class folders, no label."""
    for i, ext in enumerate(("jpg", "png", "webp")):
        write(tmp_path / "raw" / f"{i:04d}.{ext}", bytes([i]) * 20)
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 0, text
    assert read_back(tmp_path / "out") == [{"__key__": f"{i:04d}", "image": bytes([i]) * 20} for i in range(3)]


def test_images_two_folders_deep_get_no_label_unless_asked(tmp_path, capsys):
    """PI15: only ``<class>/<image>`` is labelled by itself; ``train/<class>/<image>`` is not
    (the first folder is not a class), and --label-from-dir labels by the first folder."""
    for split in ("train", "val"):
        write(tmp_path / "raw" / split / "cat" / "0.jpg", split.encode())
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 0, text
    assert [set(s) for s in read_back(tmp_path / "out")] == [{"__key__", "image"}] * 2
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "asked", "--label-from-dir")
    assert code == 0, text
    assert [s["label"] for s in read_back(tmp_path / "asked")] == [0, 1]


def test_key_groups_jpg_json_cls(tmp_path, capsys):
    raw = tmp_path / "raw"
    for i in range(7):
        write(raw / f"{i:04d}.jpg", bytes([i]) * 50)
        write(raw / f"{i:04d}.json", json.dumps({"caption": f"c{i}", "n": [i, i]}).encode())
        write(raw / f"{i:04d}.cls", f"{i % 3}\n".encode())
    code, text = pack(capsys, raw, tmp_path / "out")
    assert code == 0, text
    got = read_back(tmp_path / "out")
    for i, sample in enumerate(got):
        want = {
            "__key__": f"{i:04d}",
            "cls": i % 3,
            "jpg": bytes([i]) * 50,
            "json": {"caption": f"c{i}", "n": [i, i]},
        }
        assert_value_equal(sample, want)


def test_jsonl(tmp_path, capsys):
    rows = [
        {"id": i, "text": "é" * i, "tags": ["a", None, 1.5], "nested": {"k": [i]}}
        for i in range(30)
    ]
    write(tmp_path / "rows.jsonl", b"\n".join(json.dumps(r).encode() for r in rows) + b"\n\n")
    code, text = pack(
        capsys,
        tmp_path / "rows.jsonl",
        tmp_path / "out",
        "--shard-size",
        "600",
        "--block-size",
        "100",
    )
    assert code == 0, text
    assert read_back(tmp_path / "out") == rows
    assert len(open_dataset(str(tmp_path / "out")).manifest.shards) > 1


def test_parquet_list_columns_become_arrays(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    tokens = [np.arange(i, dtype=np.int32) for i in range(12)]
    table = pa.table(
        {
            "id": pa.array(range(12), pa.int64()),
            "text": [f"row {i}" for i in range(12)],
            "tokens": pa.array([t.tolist() for t in tokens], pa.list_(pa.int32())),
            "scores": pa.array(
                [[0.5 * i] * 3 if i % 4 else None for i in range(12)], pa.list_(pa.float64())
            ),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=5)
    code, text = pack(capsys, tmp_path / "t.parquet", tmp_path / "out")
    assert code == 0, text
    for i, sample in enumerate(read_back(tmp_path / "out")):
        scores = None if i % 4 == 0 else np.array([0.5 * i] * 3)
        assert_value_equal(
            sample, {"id": i, "text": f"row {i}", "tokens": tokens[i], "scores": scores}
        )


def test_webdataset_tar(tmp_path, capsys):
    members = []
    for i in range(6):
        members += [
            (f"s{i:03d}.jpg", bytes([i]) * 40),
            (f"s{i:03d}.cls", str(i).encode()),
            (f"s{i:03d}.txt", f"caption {i}".encode()),
        ]
    os.makedirs(tmp_path / "raw")
    with tarfile.open(tmp_path / "raw" / "part-0.tar", "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 0, text
    got = read_back(tmp_path / "out")
    assert got == [
        {"__key__": f"s{i:03d}", "jpg": bytes([i]) * 40, "cls": i, "txt": f"caption {i}"}
        for i in range(6)
    ]


def _jsonl_with_bad_line(path) -> None:
    write(path, b'{"a": 1}\n{"a": 2\n{"a": 3}\n[4]\n')


def test_skip_bad_lists_bad_items(tmp_path, capsys):
    _jsonl_with_bad_line(tmp_path / "r.jsonl")
    code, text = pack(capsys, tmp_path / "r.jsonl", tmp_path / "out", "--skip-bad")
    assert code == 0, text
    assert "skipped 2 bad item(s)" in text and "r.jsonl:2" in text and "r.jsonl:4" in text
    assert read_back(tmp_path / "out") == [{"a": 1}, {"a": 3}]
    skipped = open_dataset(str(tmp_path / "out")).manifest.metadata["skipped"]
    assert [s["origin"].rsplit("/", 1)[-1] for s in skipped] == ["r.jsonl:2", "r.jsonl:4"]


def test_bad_item_stops_pack_naming_the_file(tmp_path, capsys):
    _jsonl_with_bad_line(tmp_path / "r.jsonl")
    code, text = pack(capsys, tmp_path / "r.jsonl", tmp_path / "out")
    assert code == 1 and "r.jsonl:2" in text and "not valid JSON" in text
    assert not os.path.exists(tmp_path / "out" / "manifest.json")


def test_unencodable_value_stops_pack_naming_the_row(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"when": pa.array([0, 1], pa.timestamp("s"))}), tmp_path / "t.parquet")
    code, text = pack(capsys, tmp_path / "t.parquet", tmp_path / "out")
    assert code == 1 and "t.parquet:row 0" in text and "$.when" in text


def test_empty_raw_folder(tmp_path, capsys):
    os.makedirs(tmp_path / "raw")
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code != 0 and "raw" in text and "no input files" in text
    assert not os.path.exists(tmp_path / "out" / "manifest.json")


def test_refuses_to_overwrite(tmp_path, capsys):
    write(tmp_path / "a.jsonl", b'{"v": 1}\n')
    write(tmp_path / "b.jsonl", b'{"v": 2}\n{"v": 3}\n')
    assert pack(capsys, tmp_path / "a.jsonl", tmp_path / "out")[0] == 0
    code, text = pack(capsys, tmp_path / "b.jsonl", tmp_path / "out")
    assert code == 1 and "--overwrite" in text
    assert read_back(tmp_path / "out") == [{"v": 1}]
    assert pack(capsys, tmp_path / "b.jsonl", tmp_path / "out", "--overwrite")[0] == 0
    assert read_back(tmp_path / "out") == [{"v": 2}, {"v": 3}]


@pytest.fixture
def small_dataset(tmp_path, capsys):
    rows = [{"id": i, "tokens": list(range(i)), "text": f"line {i}"} for i in range(12)]
    write(tmp_path / "rows.jsonl", b"\n".join(json.dumps(r).encode() for r in rows))
    assert (
        pack(
            capsys,
            tmp_path / "rows.jsonl",
            tmp_path / "out",
            "--shard-size",
            "200",
            "--block-size",
            "50",
        )[0]
        == 0
    )
    return str(tmp_path / "out")


def test_info_text_and_json(small_dataset, capsys):
    assert main(["info", small_dataset]) == 0
    text = capsys.readouterr().out
    assert "12 in" in text and "fingerprint  xxh3-128:" in text and "tokens" in text
    assert main(["info", small_dataset, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    manifest = open_dataset(small_dataset).manifest
    assert info["num_samples"] == 12 and info["num_shards"] == len(manifest.shards) > 1
    assert info["fingerprint"] == manifest.fingerprint and info["schema"]["id"] == {"type": "int"}


def test_head_text_and_json(small_dataset, capsys):
    assert main(["head", small_dataset, "-n", "5"]) == 0
    text = capsys.readouterr().out
    assert text.count("--- sample") == 5 and "line 4" in text and "line 5" not in text
    assert main(["head", small_dataset, "-n", "5", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in shown] == [0, 1, 2, 3, 4]
    assert shown[4]["tokens"] == [0, 1, 2, 3]


def test_head_renders_arrays_and_bytes(tmp_path, capsys):
    import shardkit as sk

    with sk.ShardWriter(str(tmp_path / "ds")) as w:
        w.write({"a": np.arange(20, dtype=np.int32), "b": b"\x00" * 40, "s": np.float32(2.5)})
    assert main(["head", str(tmp_path / "ds"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)[0]
    assert shown["a"].startswith("ndarray int32 [20] [0, 1, 2") and shown["b"].startswith(
        "bytes[40]"
    )




@pytest.mark.slow
def test_pack_workers_2_is_byte_identical_to_workers_1(tmp_path):
    """W3: the output depends on the input only, not on --workers."""
    rows = [{"id": i, "tokens": list(range(i % 50)), "text": "x" * (i % 17)} for i in range(1500)]
    write(tmp_path / "rows.jsonl", b"\n".join(json.dumps(r).encode() for r in rows))
    for workers in ("1", "2"):
        subprocess.run(
            [
                *SHARDKIT,
                "pack",
                str(tmp_path / "rows.jsonl"),
                str(tmp_path / f"out{workers}"),
                "--workers",
                workers,
                "--shard-size",
                "20KiB",
                "--block-size",
                "2KiB",
                "--no-progress",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    one, two = read_tree(tmp_path / "out1"), read_tree(tmp_path / "out2")
    assert len(one) > 3 and one == two


@pytest.mark.slow
def test_sigkill_during_pack_leaves_no_manifest(tmp_path):
    """W2: a pack killed after its first shards leaves no manifest; rerunning works.

    Deterministic: pack runs only in 5 ms slices between SIGSTOPs, and is checked and killed
    while stopped, as soon as its first shard is sealed; the ~90 shards left cannot all be
    written in one slice, so the kill always lands in the middle of the pack."""
    rng = np.random.default_rng(1)
    raw = tmp_path / "raw"
    for i in range(1500):
        write(raw / f"{i:05d}.bin", rng.bytes(4000))
    last = raw / "99999.bin"
    out = tmp_path / "out"
    args = [
        *SHARDKIT,
        "pack",
        str(raw),
        str(out),
        "--shard-size",
        "64KiB",
        "--block-size",
        "16KiB",
        "--no-progress",
        "--no-shuffle",  # shards appear while the source is read (a shuffle writes them at the end)
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            proc.send_signal(signal.SIGSTOP)
            os.waitpid(proc.pid, os.WUNTRACED)  # stopped for sure before looking
            if os.path.isdir(out / "shards") and any(n.endswith(".sks") for n in os.listdir(out / "shards")):
                break
            assert time.monotonic() < deadline, "pack sealed no shard in 120 s"
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.005)
            assert proc.poll() is None, f"pack exited ({proc.returncode}) before it could be killed"
        assert not os.path.exists(out / "manifest.json"), "pack finished within one slice"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert not os.path.exists(out / "manifest.json")
    write(last, b"the last one")
    subprocess.run(args, check=True, capture_output=True, timeout=120)
    assert not [n for n in os.listdir(out / "shards") if n.startswith(".tmp-")]  # the killed shard's
    got = list(open_dataset(str(out)).samples())
    assert len(got) == 1501 and got[7]["bin"] == (raw / "00007.bin").read_bytes()
    assert got[-1]["bin"] == b"the last one"
    assert verify_dataset(open_dataset(str(out))).ok


def test_truncated_tar_is_named(tmp_path, capsys):
    os.makedirs(tmp_path / "raw")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for i in range(3):
            info = tarfile.TarInfo(f"s{i}.bin")
            info.size = 5000
            tar.addfile(info, io.BytesIO(b"x" * 5000))
    write(tmp_path / "raw" / "part.tar", buffer.getvalue()[:7000])
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 1 and "part.tar" in text and "not a readable tar" in text
    assert not os.path.exists(tmp_path / "out" / "manifest.json")
