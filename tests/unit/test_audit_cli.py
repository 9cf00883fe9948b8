"""``shardkit audit`` on hand-made audit folders (specs/resume-state.md R15): exit 0 for a run that
trained every element as planned, 1 naming the lost and duplicated ones (global index; a
mixture's source and index in it; a token run's document and position), 2 for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import shardkit as sk
from shardkit.cli import main
from shardkit.read.audit import mixture_expectation, weighted_multiplicities
from tests.helpers.datasets import write_ids
from tests.unit.test_audit_weighted import EPOCH_SIZE, NUM_SAMPLES, SEED, dataset, write_run  # noqa: F401


def audit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["audit", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_lost_and_duplicated_samples_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = list(range(20))
    write_run(tmp_path / "good", [ids])
    assert audit(capsys, tmp_path / "good", "--num-samples", 20)[0] == 0
    write_run(tmp_path / "bad", [[i for i in ids if i not in (3, 11)] + [7, 7]])
    code, out, _ = audit(capsys, tmp_path / "bad", "--num-samples", 20)
    assert code == 1 and "AUDIT FAILED" in out
    assert "lost (2): sample 3, sample 11" in out and "duplicated (1): sample 7 x2" in out, out


def test_the_named_list_is_capped_with_its_total(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "run", [list(range(10))])
    code, out, _ = audit(capsys, tmp_path / "run", "--num-samples", 100, "--named", 3)
    assert code == 1 and "lost (90): sample 10, sample 11, sample 12 (and 87 more)" in out, out


def test_planned_drops_are_expected_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """R3: the samples rank 0's "dropped" line names are not lost; any other missing one is."""
    write_run(tmp_path / "run", [list(range(18))])
    with open(tmp_path / "run" / "run000-rank0.jsonl") as fh:
        lines = fh.read()
    (tmp_path / "run" / "run000-rank0.jsonl").write_text(
        json.dumps({"run": 0, "epoch": 0, "step": 0, "dropped": [18, 19]}) + "\n" + lines)
    code, out, _ = audit(capsys, tmp_path / "run", "--num-samples", 20)
    assert code == 0 and "planned drops 2" in out, out
    code, out, _ = audit(capsys, tmp_path / "run", "--num-samples", 21)
    assert code == 1 and "lost (1): sample 20" in out, out


def test_a_killed_launchs_steps_after_the_resume_are_not_counted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Launch 0 trained steps 1-3 but was resumed from step 2: its step 3 was lost and trained
    again by launch 1; counted twice, it would be a duplicate."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run000.json").write_text(json.dumps({"resumed_from_step": 0}))
    (folder / "run001.json").write_text(json.dumps({"resumed_from_step": 2}))
    steps = [[0, 1], [2, 3], [4, 5]]
    (folder / "run000-rank0.jsonl").write_text("".join(
        json.dumps({"run": 0, "epoch": 0, "step": s + 1, "ids": ids}) + "\n" for s, ids in enumerate(steps))
        + '{"run": 0, "epoch": 0, "step": 4, "ids": [6')  # a line cut by SIGKILL
    (folder / "run001-rank0.jsonl").write_text(json.dumps({"run": 1, "epoch": 0, "step": 3, "ids": [4, 5]}) + "\n")
    assert audit(capsys, folder, "--num-samples", 6)[0] == 0
    (folder / "run001.json").write_text(json.dumps({"resumed_from_step": 3}))
    code, out, _ = audit(capsys, folder, "--num-samples", 6)
    assert code == 1 and "duplicated (2): sample 4, sample 5" in out, out


def test_a_weighted_run_names_the_sample_off_its_multiplicity(
        dataset: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    m = weighted_multiplicities(dataset, "weight", EPOCH_SIZE, SEED)(0)
    ids = np.random.default_rng(0).permutation(np.repeat(np.arange(NUM_SAMPLES), m)).tolist()
    heavy = int(np.argmax(m))
    write_run(tmp_path / "run", [ids + [heavy]])
    common = ["--data", dataset, "--sample-weights", "weight", "--samples-per-epoch", EPOCH_SIZE, "--seed", SEED]
    code, out, _ = audit(capsys, tmp_path / "run", *common)
    assert code == 1 and f"duplicated (1): sample {heavy}" in out and "extra copies 1" in out, out
    write_run(tmp_path / "good", [ids])
    assert audit(capsys, tmp_path / "good", *common)[0] == 0


def test_a_mixture_run_names_the_source_and_index(
        dataset: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    other = write_ids(str(tmp_path / "other"), 7, shard_size=400)
    mix = tmp_path / "mix.toml"
    mix.write_text(f'samples_per_epoch = 40\n[[sources]]\npath = "{dataset}"\nname = "big"\nweight = 0.5\n'
                   f'[[sources]]\npath = "{other}"\nname = "small"\nweight = 0.5\n')
    total, of, _ = mixture_expectation(str(mix), SEED)
    ids = np.repeat(np.arange(total), of(0))
    small = [int(i) for i in ids if i >= NUM_SAMPLES]
    lost = small[0]
    write_run(tmp_path / "run", [[int(i) for i in ids if i != lost] + [0]])
    code, out, _ = audit(capsys, tmp_path / "run", "--data", mix, "--seed", SEED)
    assert code == 1, out
    copies = small.count(lost)
    assert f"lost (1): small[{lost - NUM_SAMPLES}] (sample {lost})" + (f" x{copies}" if copies > 1 else "") in out
    assert "duplicated (1): big[0] (sample 0)" in out, out
    write_run(tmp_path / "good", [ids.tolist()])
    assert audit(capsys, tmp_path / "good", "--data", mix, "--seed", SEED)[0] == 0


def test_a_token_run_names_the_document_and_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "docs")
    with sk.ShardWriter(data, shard_size=400) as writer:
        for i in range(4):
            writer.write({"tokens": np.arange(3 + i, dtype=np.int32)})
    folder = tmp_path / "run"
    folder.mkdir()
    tokens = {"field": "tokens", "mode": "concat", "bos_id": None, "eos_id": None}
    (folder / "run000.json").write_text(json.dumps({"resumed_from_step": 0, "tokens": tokens}))
    pairs = [[d, p] for d in range(4) for p in range(3 + d) if (d, p) != (2, 1)] + [[0, 0]]
    (folder / "run000-rank0.jsonl").write_text(json.dumps({"run": 0, "epoch": 0, "step": 1, "pairs": pairs}) + "\n")
    code, out, _ = audit(capsys, folder, "--tokens", "--data", data)
    assert code == 1 and "lost (1): document 2 position 1" in out and "duplicated (1): document 0 position 0" in out
    pairs = [p for p in pairs[:-1]] + [[2, 1]]
    (folder / "run000-rank0.jsonl").write_text(json.dumps({"run": 0, "epoch": 0, "step": 1, "pairs": pairs}) + "\n")
    assert audit(capsys, folder, "--tokens", "--data", data)[0] == 0


@pytest.mark.parametrize("args, message", [
    (["--num-samples", "5"], "no runNNN.json"),
    ([], "give --data"),
    (["--tokens"], "--tokens needs --data"),
    (["--sample-weights", "w"], "--sample-weights needs --data"),
])
def test_bad_input_exits_2_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                       message: str) -> None:
    code, _, err = audit(capsys, tmp_path, *args)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert audit(capsys, tmp_path / "missing", "--num-samples", 5)[0] == 2


def test_lines_of_one_step_all_count_unless_the_sink_wrote_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trainer's own lines may share a step (gradient accumulation): all count. In a run the
    sink wrote ("writer": "shardkit.loader"), a step written twice (after ``rewind``) counts once."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run000.json").write_text(json.dumps({"resumed_from_step": 0}))
    (folder / "run000-rank0.jsonl").write_text("".join(
        json.dumps({"run": 0, "epoch": 0, "step": 1, "ids": ids}) + "\n" for ids in ([0, 1], [2, 3])))
    assert audit(capsys, folder, "--num-samples", 4)[0] == 0
    (folder / "run000.json").write_text(json.dumps({"resumed_from_step": 0, "writer": "shardkit.loader"}))
    code, out, _ = audit(capsys, folder, "--num-samples", 4)
    assert code == 1 and "lost (2): sample 0, sample 1" in out, out
