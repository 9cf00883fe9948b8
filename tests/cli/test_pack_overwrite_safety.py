"""A failed ``pack --overwrite`` never costs the previous dataset, and no folder keeps files that
no manifest names (shard-format.md W2, W5): faults injected at every mutation of the output
folder, by exception in-process and by SIGKILL of a real ``shardkit pack`` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shardkit.cli import main
from shardkit.read import open_dataset
from shardkit.read.orphans import unnamed_files
from shardkit.read.verify import verify_dataset
from shardkit.write.pack import PackOptions, pack
from tests.helpers.faults import InjectedFault, fail_at
from tests.helpers.files import read_tree

SIZES = {"shard_size": "2KB", "block_size": "512B"}
OPTIONS = PackOptions(**SIZES, overwrite=True)  # type: ignore[arg-type]


def jsonl(folder: str, tag: str, count: int) -> str:
    os.makedirs(folder)
    with open(os.path.join(folder, "part.jsonl"), "w") as fh:
        for index in range(count):
            fh.write(json.dumps({"id": index, "tag": tag, "text": f"{tag} {index} " * 8}) + "\n")
    return folder


@pytest.fixture
def sources(tmp_path) -> dict[str, str]:
    """An old input (5 shards) and a new one (3 shards), so both more and fewer names occur."""
    return {"old": jsonl(str(tmp_path / "old"), "old", 60), "new": jsonl(str(tmp_path / "new"), "new", 35)}


def contents(out: str) -> str:
    """Which dataset ``out`` holds, after checking it is whole: "old" or "new"."""
    dataset = open_dataset(out)
    assert verify_dataset(dataset).ok
    tags = {sample["tag"] for sample in dataset.samples()}
    assert len(tags) == 1 and dataset.manifest.num_samples == {"old": 60, "new": 35}[tags.pop()]
    return next(iter({s["tag"] for s in dataset.samples()}))


def count_mutations(sources: dict[str, str], out: str) -> int:
    pack(sources["old"], out, OPTIONS)
    with fail_at(0) as counter:
        pack(sources["new"], out, OPTIONS)
    return len(counter.calls)


def test_overwrite_gives_the_bytes_of_a_fresh_pack_w1(sources, tmp_path) -> None:
    fresh, replaced = str(tmp_path / "fresh"), str(tmp_path / "replaced")
    pack(sources["new"], fresh, OPTIONS)
    pack(sources["old"], replaced, OPTIONS)
    pack(sources["new"], replaced, OPTIONS)
    assert read_tree(replaced) == read_tree(fresh)


def test_an_exception_at_any_point_of_an_overwrite_keeps_a_whole_dataset_w5(sources, tmp_path) -> None:
    total = count_mutations(sources, str(tmp_path / "probe"))
    assert total >= 12  # shards, staged manifest, deletes, links, final manifest, deletes
    seen = []
    for index in range(1, total + 1):
        out = str(tmp_path / f"out-{index}")
        pack(sources["old"], out, OPTIONS)
        with fail_at(index) as counter, pytest.raises(InjectedFault):
            pack(sources["new"], out, OPTIONS)
        held = contents(out)
        seen.append(held)
        assert unnamed_files(open_dataset(out)) == [], (index, counter.calls[index - 1])
        if "manifest.json" not in "".join(counter.calls[:index - 1]):
            assert held == "old", f"the old dataset was lost at {counter.calls[index - 1]}"
    assert seen[0] == "old" and seen[-1] == "new"


def test_a_failing_source_keeps_the_old_dataset(sources, tmp_path, capsys) -> None:
    out = str(tmp_path / "out")
    pack(sources["old"], out, OPTIONS)
    with open(os.path.join(sources["new"], "part.jsonl"), "a") as fh:
        fh.write("{not json\n")
    assert main(["pack", sources["new"], out, "--overwrite", "--no-progress",
                 "--shard-size", "2KB", "--block-size", "512B"]) == 1
    assert "part.jsonl" in capsys.readouterr().err
    assert contents(out) == "old" and unnamed_files(open_dataset(out)) == []


KILL = ("import os, sys; sys.path.insert(0, os.getcwd()); "
        "from tests.helpers.faults import fail_at, sigkill; "
        "faults = fail_at(int(os.environ['FAULT_AT']), sigkill); faults.__enter__(); "
        "from shardkit.cli import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.slow
def test_sigkill_at_any_point_of_an_overwrite_keeps_a_whole_dataset_w5(sources, tmp_path) -> None:
    """Then the next pack into the folder removes every leftover of the killed one."""
    total = count_mutations(sources, str(tmp_path / "probe"))
    for index in range(1, total + 1):
        out = str(tmp_path / f"out-{index}")
        pack(sources["old"], out, OPTIONS)
        env = {**os.environ, "FAULT_AT": str(index), "PYTHONPATH": os.getcwd()}
        result = subprocess.run(
            [sys.executable, "-c", KILL, "pack", sources["new"], out, "--overwrite", "--no-progress",
             "--shard-size", "2KB", "--block-size", "512B"],
            capture_output=True, text=True, env=env, timeout=120, check=False)
        assert result.returncode == -9, result.stderr
        contents(out)  # old or new, whole
        pack(sources["old"], out, OPTIONS)
        assert contents(out) == "old" and unnamed_files(open_dataset(out)) == [], index
        assert sorted(os.listdir(out)) == ["manifest.json", "shards"]


def test_a_killed_writers_shards_are_removed_by_the_next_pack_w5(sources, tmp_path) -> None:
    """No manifest (the writer died before it), more shards than the next pack writes."""
    out = str(tmp_path / "out")
    pack(sources["old"], out, OPTIONS)
    os.remove(os.path.join(out, "manifest.json"))
    with open(os.path.join(out, "shards", ".tmp-0123-shard-000005.sks"), "wb") as fh:
        fh.write(b"partial")
    pack(sources["new"], out, PackOptions(**SIZES))  # type: ignore[arg-type]
    assert contents(out) == "new" and unnamed_files(open_dataset(out)) == []


def test_files_no_writer_makes_in_the_shards_folder_are_refused_w5(sources, tmp_path, capsys) -> None:
    out = str(tmp_path / "out")
    os.makedirs(os.path.join(out, "shards"))
    with open(os.path.join(out, "shards", "notes.txt"), "w") as fh:
        fh.write("mine")
    assert main(["pack", sources["new"], out, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "shards/notes.txt" in err and "no manifest names" in err and "Traceback" not in err
    assert os.listdir(os.path.join(out, "shards")) == ["notes.txt"]


def test_verify_reports_unnamed_files_strict_makes_them_an_error_w5(sources, tmp_path, capsys) -> None:
    out = str(tmp_path / "out")
    pack(sources["new"], out, OPTIONS)
    assert main(["verify", out, "--strict", "--no-progress"]) == 0
    for extra in ("shards/shard-000009.sks", "README.md"):
        with open(os.path.join(out, extra), "w") as fh:
            fh.write("x")
    capsys.readouterr()
    assert main(["verify", out, "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "warning: 2 file(s)" in err and "README.md" in err and "shards/shard-000009.sks" in err
    assert main(["verify", out, "--strict", "--no-progress"]) == 1
    assert "error: 2 file(s)" in capsys.readouterr().err
    assert main(["verify", out, "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["unnamed_files"] == ["README.md", "shards/shard-000009.sks"]
