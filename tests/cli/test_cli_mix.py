"""``shardkit plan MIX.toml|MIX.json``: a mixture explained per source (specs/mixture.md MX1, MX2, MX6)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import shardkit as sk
from shardkit.cli import main
from shardkit.read.mixture.config import Mixture, Source, load_mixture
from tests.helpers.datasets import write_dataset

TOML = """
samples_per_epoch = 60
composition = "stratified"

[[sources]]
path = "web"
weight = 0.7

[[sources]]
path = "code"
weight = 0.3
name = "code"

[[schedule]]
first_epoch = 2
weights = { web = 1.0 }
"""


@pytest.fixture
def mixture_dir(tmp_path: Path) -> Path:
    write_dataset(str(tmp_path / "web"), [20, 20])
    write_dataset(str(tmp_path / "code"), [6])
    (tmp_path / "mix.toml").write_text(TOML)
    as_json = {"samples_per_epoch": 60, "composition": "stratified",
               "sources": [{"path": "web", "weight": 0.7}, {"path": "code", "weight": 0.3, "name": "code"}],
               "schedule": [{"first_epoch": 2, "weights": {"web": 1.0}}]}
    (tmp_path / "mix.json").write_text(json.dumps(as_json))
    return tmp_path


def plan_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main(["plan", str(path), "--world-size", "2", "--workers", "2", "--batch-size", "3", "--json",
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", ["mix.toml", "mix.json"])
def test_plan_explains_each_source(mixture_dir: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Counts (42 + 18 = 60), passes, repeats and where each source starts."""
    report = plan_json(mixture_dir / name, capsys)
    web, code = report["sources"]
    assert (web["name"], web["samples_per_epoch"], web["repeats"]) == ("web", 42, [1, 2])
    assert (code["name"], code["samples_per_epoch"], code["passes"], code["repeats"]) == ("code", 18, 3.0, [3, 3])
    assert report["steps_per_rank"] == 60 // 6 and report["num_dropped"] == 0
    assert web["samples_per_step"] == pytest.approx(42 * 6 / 60)


def test_plan_follows_cursors_and_the_schedule(mixture_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MX2/MX6: epoch 2 starts after two epochs of (42, 18); from epoch 2 on only web."""
    report = plan_json(mixture_dir / "mix.toml", capsys, "--epoch", "2")
    web, code = report["sources"]
    assert (web["first_pass"], web["pass_position"], web["samples_per_epoch"]) == (2, 4, 60)
    assert (code["first_pass"], code["pass_position"], code["samples_per_epoch"]) == (6, 0, 0)


def test_plan_prints_a_table(mixture_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(mixture_dir / "mix.toml"), "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "mixture of 2 sources, 60 samples per epoch" in out and "15 steps per rank" in out
    assert "1|2" in out


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("sources = 3", "sources: expected a list"),
        ("[[sources]]\nweight = 1", "sources\\[0\\]: expected keys"),
        ("colour = 1\n[[sources]]\npath = 'web'", "expected keys"),
        ("[[sources]]\npath = 'web'\n[[schedule]]\nfirst_epoch = 1\nweights = { nope = 1 }", "unknown sources"),
        ("[[sources]]\npath = 'web'\n[[sources]]\npath = 'x/web'", "unique"),
        ("not toml [", "cannot read the mixture file"),
        # MX11/MX13: schedules inside an epoch and weight units
        ("[[sources]]\npath = 'web'\n[[schedule]]\nfirst_epoch = 0\nfirst_sample = 'x'\nweights = {}",
         "first_sample"),
        ("samples_per_epoch = 10\n[[sources]]\npath = 'web'\n[[schedule]]\nfirst_epoch = 0\nfirst_sample = 10\n"
         "weights = { web = 1 }", "below samples_per_epoch"),
        ("weight_unit = 'bytes'\n[[sources]]\npath = 'web'", "weight_unit"),
    ],
)
def test_bad_mixture_files_exit_2_naming_the_file(mixture_dir: Path, text: str, match: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = mixture_dir / "bad.toml"
    path.write_text(text)
    assert main(["plan", str(path), "--batch-size", "2"]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and re.search(match, err), err


def test_a_missing_source_is_named(mixture_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (mixture_dir / "gone.toml").write_text("[[sources]]\npath = 'nowhere'\nname = 'ghost'\n")
    assert main(["plan", str(mixture_dir / "gone.toml"), "--batch-size", "2"]) == 2
    assert "'ghost'" in capsys.readouterr().err


def test_python_and_file_descriptions_agree(mixture_dir: Path) -> None:
    loaded = load_mixture(str(mixture_dir / "mix.toml"))
    built = Mixture([Source(str(mixture_dir / "web"), 0.7), Source(str(mixture_dir / "code"), 0.3, "code")],
                    60, "stratified", {2: {"web": 1.0}})
    assert loaded == built == sk.Mixture(built.sources, 60, "stratified", {2: {"web": 1.0}})


def test_plan_explains_each_segment_of_an_epoch(mixture_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MX11: a change at sample 30 of epoch 0 (step 5 at 2 ranks x batch 3) splits it in two
    segments of exact counts; the epoch's counts are their sums."""
    text = TOML + "\n[[schedule]]\nfirst_epoch = 0\nfirst_sample = 30\nweights = { code = 1.0 }\n"
    (mixture_dir / "steps.toml").write_text(text)
    report = plan_json(mixture_dir / "steps.toml", capsys)
    first, second = report["segments"]
    assert (first["first_sample"], first["end"], first["samples"]) == (0, 30, {"web": 21, "code": 9})
    assert (second["first_step"], second["samples"]) == (5, {"web": 0, "code": 30})
    assert [row["samples_per_epoch"] for row in report["sources"]] == [21, 39]
    assert main(["plan", str(mixture_dir / "steps.toml"), "--batch-size", "3", "--world-size", "2"]) == 0
    assert "samples 30..59 (from step 5): web 0, code 30" in capsys.readouterr().out


def test_corrupt_bytes_met_counting_tokens_exit_1_naming_the_file(mixture_dir: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A token-weighted mixture counts each source's tokens; a damaged length index there is corrupt
    data (exit 1, the file named), not an unreadable description (exit 2)."""
    index = mixture_dir / "code" / "shards" / "lengths-000.u32"
    damaged = bytearray(index.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    index.write_bytes(bytes(damaged))
    (mixture_dir / "tokens.toml").write_text(
        'samples_per_epoch = 30\nweight_unit = "tokens"\n'
        '[[sources]]\npath = "web"\nweight = 0.5\n[[sources]]\npath = "code"\nweight = 0.5\n')
    assert main(["plan", str(mixture_dir / "tokens.toml"), "--batch-size", "2"]) == 1
    assert "lengths-000.u32" in capsys.readouterr().err


def test_plan_explains_a_weighted_source(mixture_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MX17: a source's ``sample_weights`` key (a numeric field, here ``id``: sample 0 has weight 0)
    is read once; the report gives its pass of 39 elements and the multiplicity range per pass."""
    (mixture_dir / "weighted.toml").write_text(TOML.replace('weight = 0.7\n', 'weight = 0.7\nsample_weights = "id"\n'))
    report = plan_json(mixture_dir / "weighted.toml", capsys)
    web, code = report["sources"]
    weights = web["sample_weights"]
    assert (weights["pass_length"], weights["zero_weight"], weights["multiplicity_per_pass"]) == (39, 1, [0, 2])
    assert weights["where"].startswith("field 'id' of ") and web["passes"] == pytest.approx(42 / 39)
    assert "sample_weights" not in code
    loaded = load_mixture(str(mixture_dir / "weighted.toml"))
    assert loaded.sources[0].sample_weights == "id" and loaded.sources[1].sample_weights is None
    assert main(["plan", str(mixture_dir / "weighted.toml"), "--batch-size", "3"]) == 0
    assert "web: weighted by field 'id' of" in capsys.readouterr().out


@pytest.mark.parametrize(("key", "match"), [('"nope"', "no field 'nope'"), ('"text"', "field 'text'"),
                                            ("[1, 2]", "sample_weights: expected a numeric field's name")])
def test_a_bad_weight_field_exits_2_naming_the_source_and_the_file(
        mixture_dir: Path, key: str, match: str, capsys: pytest.CaptureFixture[str]) -> None:
    (mixture_dir / "badweights.toml").write_text(
        f"[[sources]]\npath = 'web'\nname = 'webby'\nsample_weights = {key}\n[[sources]]\npath = 'code'\n")
    assert main(["plan", str(mixture_dir / "badweights.toml"), "--batch-size", "2"]) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and "badweights.toml" in err, err
    assert "'webby'" in err or "sources[0]" in err, err
