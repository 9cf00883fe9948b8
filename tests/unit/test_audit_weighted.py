"""tools/audit.py on weighted runs (specs/sample-weights.md SW1, SW4): an epoch passes when every
sample was trained exactly its multiplicity ``m_j`` times, and fails on one copy too many or
too few; the unweighted check (each sample once) would flag the same run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from tests.helpers.datasets import write_ids
from tests.helpers.trainer_jobs import REPO, load_audit

NUM_SAMPLES, EPOCH_SIZE, SEED = 60, 90, 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = str(tmp_path_factory.mktemp("weighted_audit"))
    with sk.ShardWriter(folder, shard_size=400) as writer:
        for i in range(NUM_SAMPLES):
            writer.write({"id": i, "weight": 3.0 if i % 5 == 0 else 0.5 + (i % 3)})
    return folder


def write_run(folder: Path, epochs: list[list[int]], ranks: int = 2) -> None:
    """One run's audit files: the ids of each epoch dealt to ``ranks`` ranks, 4 per step."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run000.json").write_text(json.dumps({"resumed_from_step": 0}))
    for rank in range(ranks):
        with open(folder / f"run000-rank{rank}.jsonl", "w") as fh:
            step = 0
            for epoch, ids in enumerate(epochs):
                mine = ids[rank::ranks]
                for lo in range(0, len(mine), 4):
                    step += 1
                    fh.write(json.dumps({"run": 0, "epoch": epoch, "step": step, "ids": mine[lo:lo + 4]}) + "\n")


def trained(tool: Any, dataset: str, epochs: int) -> list[list[int]]:
    """What a correct weighted run trains: sample j exactly m_j times per epoch, shuffled."""
    m = tool.weighted_multiplicities(dataset, "weight", EPOCH_SIZE, SEED)
    rng = np.random.default_rng(0)
    return [rng.permutation(np.repeat(np.arange(NUM_SAMPLES), m(epoch))).tolist() for epoch in range(epochs)]


def test_a_weighted_run_passes_exactly_at_its_multiplicities_and_fails_one_copy_off(
        dataset: str, tmp_path: Path) -> None:
    """SW1/SW4: the audit counts each sample against m_j of its epoch; a duplicated copy or a
    lost copy is flagged (and names how many samples are off)."""
    tool = load_audit()
    expected = tool.weighted_multiplicities(dataset, "weight", EPOCH_SIZE, SEED)
    epochs = trained(tool, dataset, 2)
    assert [len(ids) for ids in epochs] == [EPOCH_SIZE, EPOCH_SIZE]
    assert any(expected(0) > 1) and any(expected(0) == 0)  # a real weighted multiset
    write_run(tmp_path / "good", epochs)
    report = tool.audit(str(tmp_path / "good"), NUM_SAMPLES, 2, expected)
    assert report["ok"], report
    assert [e["samples"] for e in report["epochs"]] == [EPOCH_SIZE, EPOCH_SIZE]
    assert not tool.audit(str(tmp_path / "good"), NUM_SAMPLES, 2)["ok"]  # "once each" would flag it
    extra = [epochs[0] + [epochs[0][0]], epochs[1]]
    write_run(tmp_path / "extra", extra)
    report = tool.audit(str(tmp_path / "extra"), NUM_SAMPLES, 2, expected)
    assert not report["ok"] and report["epochs"][0]["duplicates"] == 1 and report["epochs"][0]["missing"] == 0
    assert report["epochs"][1]["duplicates"] == report["epochs"][1]["missing"] == 0
    lost = [epochs[0], epochs[1][1:]]
    write_run(tmp_path / "lost", lost)
    report = tool.audit(str(tmp_path / "lost"), NUM_SAMPLES, 2, expected)
    assert not report["ok"] and report["epochs"][1]["missing"] == 1 and report["epochs"][1]["samples_off"] == 1
    swapped = [epochs[0], epochs[1][1:] + [int(np.flatnonzero(expected(1) == 0)[0])]]  # right size, wrong sample
    write_run(tmp_path / "swapped", swapped)
    report = tool.audit(str(tmp_path / "swapped"), NUM_SAMPLES, 2, expected)
    assert report["epochs"][1]["samples"] == EPOCH_SIZE and report["epochs"][1]["samples_off"] == 2
    assert not report["ok"]


def test_the_audit_cli_checks_a_weighted_run(dataset: str, tmp_path: Path) -> None:
    """``--data --sample-weights`` (field or .npy) audits against m_j: exit 0, then exit 1 for
    a duplicated copy; neither --num-samples nor --sample-weights is a usage error (2)."""
    tool = load_audit()
    epochs = trained(tool, dataset, 1)
    write_run(tmp_path / "good", epochs)
    write_run(tmp_path / "bad", [epochs[0] + [epochs[0][-1]]])
    weights = tmp_path / "w.npy"
    np.save(weights, np.array([3.0 if i % 5 == 0 else 0.5 + (i % 3) for i in range(NUM_SAMPLES)]))

    def run(folder: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(REPO / "tools" / "audit.py"), str(tmp_path / folder), *extra],
                              capture_output=True, text=True, cwd=REPO, timeout=120)

    common = ["--data", dataset, "--samples-per-epoch", str(EPOCH_SIZE), "--seed", str(SEED)]
    good = run("good", *common, "--sample-weights", "weight")
    assert good.returncode == 0 and "AUDIT OK" in good.stdout, good.stdout + good.stderr
    assert run("good", *common, "--sample-weights", str(weights)).returncode == 0
    bad = run("bad", *common, "--sample-weights", "weight")
    assert bad.returncode == 1 and "extra copies 1" in bad.stdout, bad.stdout
    assert run("good").returncode == 2


def test_the_audit_checks_a_mixture_run_with_a_weighted_source(dataset: str, tmp_path: Path) -> None:
    """MX17 (mixture.md): ``--data MIX.toml`` audits each sample of each source against the
    mixture epoch's count (weighted passes included): exit 0 for the planned multiset, exit 1
    for one copy too many of the weighted source."""
    tool = load_audit()
    other = write_ids(str(tmp_path / "other"), 7, shard_size=400)
    mix = tmp_path / "mix.toml"
    mix.write_text(f'samples_per_epoch = 50\n[[sources]]\npath = "{dataset}"\nname = "w"\nweight = 0.8\n'
                   f'sample_weights = "weight"\n[[sources]]\npath = "{other}"\nweight = 0.2\n')
    total, expected = tool.mixture_multiplicities(str(mix), SEED)
    assert total == NUM_SAMPLES + 7 and int(expected(0).sum()) == 50
    assert expected(0)[:NUM_SAMPLES].max() > 1 and expected(0)[NUM_SAMPLES:].sum() == 10
    rng = np.random.default_rng(1)
    epochs = [rng.permutation(np.repeat(np.arange(total), expected(e))).tolist() for e in range(2)]
    write_run(tmp_path / "good", epochs)
    heavy = int(np.argmax(expected(0)[:NUM_SAMPLES]))
    write_run(tmp_path / "bad", [epochs[0] + [heavy], epochs[1]])

    def run(folder: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(REPO / "tools" / "audit.py"), str(tmp_path / folder), "--data",
                               str(mix), "--seed", str(SEED), "--epochs", "2"],
                              capture_output=True, text=True, cwd=REPO, timeout=120)

    good = run("good")
    assert good.returncode == 0 and "AUDIT OK" in good.stdout, good.stdout + good.stderr
    bad = run("bad")
    assert bad.returncode == 1 and "extra copies 1" in bad.stdout, bad.stdout
