"""``shardkit plan MIX`` on hostile mixture files and arguments: exit 2 with one line naming the
file and the key (or the argument), never a traceback or an allocation sized by the input; the
options of ``plan DATASET`` a mixture cannot use are refused, not ignored (issue 32, item 15;
specs/mixture.md, resume-state.md R14). The real ``shardkit`` command, in a subprocess."""

from __future__ import annotations

import json

import pytest

from tests.helpers.datasets import write_dataset
from tests.helpers.hostile import run_measured

SOURCES = [{"path": "a", "name": "a"}, {"path": "b", "name": "b"}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("mix")
    write_dataset(str(root / "a"), [30, 20])
    write_dataset(str(root / "b"), [25])
    (root / "ok.json").write_text(json.dumps({"sources": SOURCES}))
    return root


def step(weights: dict) -> dict:
    return {"sources": SOURCES, "schedule": [{"first_epoch": 1, "weights": weights}]}


@pytest.mark.parametrize(("name", "body", "expected"), [
    ("weight-list", step({"a": [1], "b": 1}), "schedule[0].weights.a: expected a number, got [1]"),
    ("weight-text", step({"a": "abc", "b": 1}), "schedule[0].weights.a: expected a number, got 'abc'"),
    ("name-list", {"sources": [{"path": "a", "name": ["x"]}, SOURCES[1]]}, "sources[0]: name: expected a str"),
    ("name-table", {"sources": [{"path": "a", "name": {"x": 1}}, SOURCES[1]]}, "sources[0]: name: expected a str"),
    ("path-list", {"sources": [{"path": ["a"]}, SOURCES[1]]}, "sources[0]: path: expected a str"),
    ("huge-epoch-size", {"samples_per_epoch": 10**20, "sources": SOURCES},
     "samples_per_epoch: expected an int in 0..2**63-1"),
    ("source-weight-list", {"sources": [{"path": "a", "weight": [2]}, SOURCES[1]]}, "sources[0]: weight"),
])
def test_a_bad_mixture_file_names_file_and_key(folder, name: str, body: dict, expected: str) -> None:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(body))
    code, _, out = run_measured("plan", str(path), "--batch-size", "4")
    assert code == 2, out
    assert f"{path}: " in out and expected in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_deeply_nested_mixture_file_is_refused_by_name(folder, suffix: str) -> None:
    path = folder / f"deep{suffix}"
    nested = "[" * 100_000 + "]" * 100_000
    path.write_text(f'{{"sources": {nested}}}' if suffix == ".json" else f"sources = {nested}\n")
    code, _, out = run_measured("plan", str(path), "--batch-size", "4")
    assert code == 2, out
    assert f"{path}: cannot read the mixture file: nested too deeply" in out and "Traceback" not in out


@pytest.mark.parametrize(("args", "expected"), [
    (["--epoch", str(10**20)], "argument --epoch: expected an integer <= 2**63-1"),
    (["--batch-size", str(10**20)], "argument --batch-size: expected an integer <= 2**63-1"),
    (["--world-size", "1000000000", "--workers", "1000"], "1000000000000 consumers, at most 1048576"),
    (["--epoch", str(2**62)], "beyond 2**63-1; an epoch this late is not supported"),
    (["--quality", "id"], "--quality measures one dataset"),
    (["--spread", "4"], "--spread does not apply to a mixture"),
])
def test_bad_plan_arguments_for_a_mixture_exit_2(folder, args: list[str], expected: str) -> None:
    """No traceback and no allocation sized by the arguments (1e9 ranks x 1000 workers asked
    numpy for 7 TiB)."""
    argv = ["plan", str(folder / "ok.json"), "--batch-size", "4", *args]
    argv = argv if "--batch-size" not in args else ["plan", str(folder / "ok.json"), *args]
    code, peak_mib, out = run_measured(*argv)
    assert code == 2, out
    assert expected in out and "Traceback" not in out, out
    assert peak_mib < 1024


def test_interleave_reaches_a_mixture_plan(folder) -> None:
    """``--interleave`` is passed to the mixture's plan (it was ignored), and the report says so."""
    code, _, out = run_measured("plan", str(folder / "ok.json"), "--batch-size", "4", "--interleave", "4", "--json")
    assert code == 0, out
    assert json.loads(out[out.index("{"):])["interleave"] == 4


def test_too_many_consumers_for_a_dataset_exit_2(folder) -> None:
    code, peak_mib, out = run_measured("plan", str(folder / "a"), "--batch-size", "4", "--world-size", "1000000000",
                                       "--workers", "1000")
    assert code == 2, out
    assert "at most 1048576" in out and "Traceback" not in out and peak_mib < 1024
