"""What ``shardkit pack`` reads (specs/pack-inputs.md PI1–PI5): regular files only, the format
detected from names (compressed JSON Lines included), documentation left out with a notice,
and names that are not UTF-8 escaped wherever they are shown or stored."""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys

import pytest
import zstandard

from shardkit.cli import main
from shardkit.errors import SourceError
from shardkit.read import open_dataset
from shardkit.read.verify import verify_dataset
from shardkit.write.inputs import detect_format, input_files, kind_of, open_input, shown

SHARDKIT = os.path.join(os.path.dirname(sys.executable), "shardkit")
ROWS = [{"id": i, "text": f"row {i}", "tokens": [i, i + 1]} for i in range(40)]


def jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def pack(capsys, src, out, *extra: str) -> tuple[int, str]:
    code = main(["pack", str(src), str(out), "--no-progress", "--no-shuffle", *extra])  # rows in source order
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def read_back(out) -> list[dict]:
    dataset = open_dataset(str(out))
    assert verify_dataset(dataset).ok
    return [{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in s.items()} for s in dataset.samples()]


def hub_download(root, parts: dict[str, bytes]) -> None:
    """A folder as a dataset hub download looks: data parts plus documentation files."""
    write(root / "README.md", b"---\nlicense: mit\n---\n# A dataset\n")
    write(root / "dataset_info.json", json.dumps({"features": {"id": "int64"}}).encode())
    write(root / ".gitattributes", b"*.parquet filter=lfs\n")
    for name, data in parts.items():
        write(root / "data" / name, data)


COMPRESSORS = {
    ".jsonl": lambda b: b,
    ".jsonl.gz": gzip.compress,
    ".json.gz": gzip.compress,
    ".ndjson": lambda b: b,
    # two frames per file: a stream of concatenated frames is read to the end
    ".jsonl.zst": lambda b: b"".join(zstandard.ZstdCompressor().compress(h) for h in (b[:100], b[100:])),
}


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_hub_download_of_json_lines_packs_rows_and_ignores_docs(tmp_path, capsys, caplog, suffix):
    """PI2, PI3: one sample per row (not per file), in file order; README and
    dataset_info.json left out with a notice that names them."""
    compress = COMPRESSORS[suffix]
    hub_download(tmp_path / "raw", {f"train-0000{i}-of-00002{suffix}": compress(jsonl(ROWS[i * 20 : i * 20 + 20]))
                                    for i in range(2)})
    with caplog.at_level(logging.WARNING, logger="shardkit.write.inputs"):
        code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 0, text
    assert read_back(tmp_path / "out") == ROWS
    notice = caplog.text
    assert "ignoring 2 file(s)" in notice and "README.md" in notice and "dataset_info.json" in notice


def test_hub_download_of_parquet_packs_rows(tmp_path, capsys, caplog):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    hub_download(tmp_path / "raw", {})
    os.makedirs(tmp_path / "raw" / "data")
    for i in range(2):
        table = pa.table({"id": [r["id"] for r in ROWS[i * 20 : i * 20 + 20]],
                          "text": [r["text"] for r in ROWS[i * 20 : i * 20 + 20]]})
        pq.write_table(table, tmp_path / "raw" / "data" / f"train-0000{i}-of-00002.parquet", compression="zstd")
    with caplog.at_level(logging.WARNING, logger="shardkit.write.inputs"):
        code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 0, text
    assert read_back(tmp_path / "out") == [{"id": r["id"], "text": r["text"]} for r in ROWS]
    assert "README.md" in caplog.text


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst", ".json.gz"])
def test_one_compressed_file_is_detected_by_name(tmp_path, capsys, suffix):
    write(tmp_path / f"rows{suffix}", COMPRESSORS[suffix](jsonl(ROWS)))
    assert detect_format(str(tmp_path / f"rows{suffix}")) == "jsonl"
    code, text = pack(capsys, tmp_path / f"rows{suffix}", tmp_path / "out")
    assert code == 0, text
    assert read_back(tmp_path / "out") == ROWS


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_truncated_compressed_input_is_an_error_naming_it(tmp_path, capsys, suffix):
    """A stream cut short fails instead of packing a silently shorter dataset."""
    data = COMPRESSORS[suffix](jsonl(ROWS * 20))
    write(tmp_path / "raw" / f"part{suffix}", data[: len(data) // 2])
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 1 and f"part{suffix}" in text and "cannot read after line" in text, text
    assert not os.path.exists(tmp_path / "out" / "manifest.json")


def test_records_with_other_files_are_refused_suggesting_format(tmp_path, capsys):
    """PI3: JSONL next to images is ambiguous: refused, naming the files and --format."""
    write(tmp_path / "raw" / "rows.jsonl", jsonl(ROWS))
    write(tmp_path / "raw" / "img" / "0001.jpg", b"\xff\xd8 not really")
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 1 and "0001.jpg" in text and "--format jsonl" in text and "--format files" in text
    assert not os.path.exists(tmp_path / "out" / "manifest.json")


def test_records_of_two_formats_are_refused(tmp_path, capsys):
    write(tmp_path / "raw" / "a.jsonl", jsonl(ROWS))
    write(tmp_path / "raw" / "b.tar", b"\0" * 1024)
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 1 and "several formats (1 jsonl, 1 wds)" in text and "--format" in text


def test_explicit_format_packs_only_its_files_with_a_notice(tmp_path, capsys, caplog):
    """PI4: --format jsonl on the mixed folder reads the JSONL and names what it left out."""
    write(tmp_path / "raw" / "rows.jsonl", jsonl(ROWS))
    write(tmp_path / "raw" / "img" / "0001.jpg", b"\xff\xd8")
    with caplog.at_level(logging.WARNING, logger="shardkit.write.inputs"):
        code, text = pack(capsys, tmp_path / "raw", tmp_path / "out", "--format", "jsonl")
    assert code == 0, text
    assert read_back(tmp_path / "out") == ROWS
    assert "ignoring 1 file(s) that are not jsonl input" in caplog.text and "0001.jpg" in caplog.text


def test_image_folder_leaves_its_readme_out_unless_format_files(tmp_path, capsys, caplog):
    """PI3: with auto, documentation beside other files is left out of ``files`` too; an
    explicit --format files packs every file."""
    for i in range(3):
        write(tmp_path / "raw" / f"{i:04d}.jpg", bytes([i]) * 10)
    write(tmp_path / "raw" / "README.md", b"# images\n")
    with caplog.at_level(logging.WARNING, logger="shardkit.write.inputs"):
        assert pack(capsys, tmp_path / "raw", tmp_path / "auto")[0] == 0
    assert "ignoring 1 documentation file(s)" in caplog.text and "README.md" in caplog.text
    assert [s["__key__"] for s in read_back(tmp_path / "auto")] == ["0000", "0001", "0002"]
    assert pack(capsys, tmp_path / "raw", tmp_path / "all", "--format", "files")[0] == 0
    assert [s["__key__"] for s in read_back(tmp_path / "all")] == ["0000", "0001", "0002", "README"]


def test_a_folder_of_only_documents_packs_them(tmp_path):
    for name in ("a.md", "b.md"):
        write(tmp_path / "raw" / name, b"# doc\n")
    assert detect_format(str(tmp_path / "raw")) == "files"
    want = [str(tmp_path / "raw" / name) for name in ("a.md", "b.md")]
    assert input_files(str(tmp_path / "raw"), "files", auto=True) == want


@pytest.mark.parametrize(
    ("name", "kind"),
    [("x.jsonl", "jsonl"), ("X.JSONL.GZ", "jsonl"), ("a.ndjson.zst", "jsonl"), ("a.json.zst", "jsonl"),
     ("a.json", "other"), ("p.parquet", "parquet"), ("s.tar", "wds"), ("README", "doc"), ("LICENSE.txt", "doc"),
     ("notes.md", "doc"), ("dataset_info.json", "doc"), ("croissant.json", "doc"), ("0001.jpg", "other")],
)
def test_kind_of_name(name, kind):
    """PI2: the table of names."""
    assert kind_of(name) == kind


# ---- PI1: regular files only ---------------------------------------------------------------


def run_pack(src, out, *extra: str) -> subprocess.CompletedProcess:
    """A real ``shardkit pack`` process: a hang (the bug) fails on the timeout, not forever."""
    return subprocess.run([SHARDKIT, "pack", str(src), str(out), "--no-progress", "--no-shuffle", *extra],
                          capture_output=True, timeout=60)


@pytest.mark.parametrize("fmt", ["auto", "files"])
def test_fifo_among_inputs_is_refused_by_name(tmp_path, fmt):
    write(tmp_path / "raw" / "0001.bin", b"x" * 10)
    os.mkfifo(tmp_path / "raw" / "0002.bin")
    got = run_pack(tmp_path / "raw", tmp_path / "out", "--format", fmt)
    stderr = got.stderr.decode()
    assert got.returncode == 1 and "0002.bin: not a regular file (a FIFO)" in stderr, stderr
    assert "Traceback" not in stderr and not os.path.exists(tmp_path / "out" / "manifest.json")


@pytest.mark.parametrize("fmt", ["auto", "jsonl"])
def test_fifo_as_the_input_file_is_refused(tmp_path, fmt):
    os.mkfifo(tmp_path / "rows.jsonl")
    got = run_pack(tmp_path / "rows.jsonl", tmp_path / "out", "--format", fmt)
    assert got.returncode == 1 and "rows.jsonl: not a regular file (a FIFO)" in got.stderr.decode()


def test_symlink_to_a_device_is_refused(tmp_path, capsys):
    """Links are followed and judged by their target (/dev/null: safe to read if this broke)."""
    os.makedirs(tmp_path / "raw")
    os.symlink("/dev/null", tmp_path / "raw" / "rows.jsonl")
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out")
    assert code == 1 and "rows.jsonl: not a regular file (a character device)" in text


def test_open_input_does_not_block_on_a_fifo(tmp_path):
    """PI1: a FIFO swapped in after discovery is refused at open, without waiting for a writer."""
    os.mkfifo(tmp_path / "p.jsonl")
    with pytest.raises(SourceError, match="not a regular file"):
        open_input(str(tmp_path / "p.jsonl"))


# ---- PI5: names that are not UTF-8 ---------------------------------------------------------


def bytes_path(folder, name: bytes) -> str:
    return os.fsdecode(os.path.join(os.fsencode(str(folder)), name))


def test_skip_bad_stores_a_non_utf8_file_name_escaped(tmp_path, capsys):
    """A file whose name is not UTF-8 cannot be a key: --skip-bad skips it and the manifest
    lists it with the byte escaped as \\xff (it used to discard the whole output)."""
    write(tmp_path / "raw" / "a.txt", b"kept")
    write(bytes_path(tmp_path / "raw", b"b\xff.txt"), b"skipped")
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out", "--skip-bad")
    assert code == 0, text
    assert read_back(tmp_path / "out") == [{"__key__": "a", "txt": "kept"}]
    with open(tmp_path / "out" / "manifest.json", "rb") as fh:
        skipped = json.loads(fh.read().decode("utf-8"))["metadata"]["skipped"]
    assert [s["origin"].rsplit("/", 1)[-1] for s in skipped] == ["b\\xff"]
    assert "not valid UTF-8" in skipped[0]["error"] and "b\\xff" in text


def test_non_utf8_jsonl_file_name_in_skip_list_and_errors(tmp_path, capsys):
    write(bytes_path(tmp_path / "raw", b"rows\xfe.jsonl"), b'{"a": 1}\n{"a": \n{"a": 3}\n')
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "bad")
    assert code == 1 and "rows\\xfe.jsonl:2" in text and "not valid JSON" in text
    code, text = pack(capsys, tmp_path / "raw", tmp_path / "out", "--skip-bad")
    assert code == 0, text
    assert read_back(tmp_path / "out") == [{"a": 1}, {"a": 3}]
    skipped = open_dataset(str(tmp_path / "out")).manifest.metadata["skipped"]
    assert [s["origin"].rsplit("/", 1)[-1] for s in skipped] == ["rows\\xfe.jsonl:2"]


def test_shown_escapes_only_what_is_not_utf8():
    assert shown(os.fsdecode(b"caf\xc3\xa9/\xff\xfe.jsonl")) == "café/\\xff\\xfe.jsonl"


def test_the_cli_prints_the_notice(tmp_path):
    """PI3: a real ``shardkit pack`` shows what it left out on stderr."""
    hub_download(tmp_path / "raw", {"train.jsonl.gz": gzip.compress(jsonl(ROWS))})
    got = run_pack(tmp_path / "raw", tmp_path / "out")
    stderr = got.stderr.decode()
    assert got.returncode == 0, stderr
    assert "ignoring 2 file(s) that are not jsonl input" in stderr and "README.md" in stderr
    assert "packed 40 samples" in got.stdout.decode()
