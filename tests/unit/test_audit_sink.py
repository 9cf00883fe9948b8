"""The audit sink (specs/resume-state.md R15): ``ShardLoader(..., audit_dir=)`` writes what the
loop received, and ``shardkit audit`` proves a run killed after its checkpoint and resumed by a
new launch trained every sample once — with no audit code in the loop."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import shardkit as sk
from tests.helpers.trainer_jobs import shardkit_audit

NUM_SAMPLES, BATCH = 50, 4  # 12 full batches, 2 samples dropped per epoch (tail="drop")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = str(tmp_path_factory.mktemp("sink_data"))
    with sk.ShardWriter(folder, shard_size=200) as writer:
        for i in range(NUM_SAMPLES):
            writer.write({"id": i})
    return folder


def loader(data: str, audit: Path, with_index: bool = True) -> sk.ShardLoader:
    ds = sk.StreamingDataset(data, batch_size=BATCH, seed=5, with_index=with_index)
    return sk.ShardLoader(ds, audit_dir=audit)


def killed_and_resumed(data: str, audit: Path) -> None:
    """Launch 0: checkpoint after 3 batches, train 2 more, killed. Launch 1: load, train 2 epochs."""
    first = loader(data, audit)
    batches = iter(first)
    for _ in range(3):
        next(batches)
    state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint holds
    next(batches), next(batches)  # trained, then lost with the kill: trained again below
    second = loader(data, audit)
    second.load_state_dict(state)
    for _ in range(2):
        for _ in second:
            pass


def test_a_killed_and_resumed_run_audits_clean_with_only_audit_dir(dataset: str, tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    killed_and_resumed(dataset, audit)
    assert sorted(p.name for p in audit.iterdir()) == ["run000-rank0.jsonl", "run000.json",
                                                       "run001-rank0.jsonl", "run001.json"]
    assert json.loads((audit / "run001.json").read_text())["resumed_from_step"] == 3
    lines = [json.loads(x) for x in (audit / "run000-rank0.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2, 3, 4, 5] and "dropped" in lines[0]  # R3 drops first
    done = shardkit_audit(str(audit), "--data", dataset, "--epochs", "2")
    assert done.returncode == 0 and "AUDIT OK" in done.stdout, done.stdout + done.stderr
    assert "planned drops 2" in done.stdout


def test_a_lost_batch_is_named_and_fails_the_audit(dataset: str, tmp_path: Path) -> None:
    """Drop one committed step line of launch 1 (what a loader that skipped a batch on resume
    would leave): the audit exits 1 naming the samples of that batch."""
    audit = tmp_path / "audit"
    killed_and_resumed(dataset, audit)
    path = audit / "run001-rank0.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    gone = json.loads(lines[1])
    assert "ids" in gone
    path.write_text("".join(lines[:1] + lines[2:]))
    done = shardkit_audit(str(audit), "--data", dataset, "--epochs", "2")
    assert done.returncode == 1 and "AUDIT FAILED" in done.stdout, done.stdout + done.stderr
    named = ", ".join(f"sample {i}" for i in sorted(gone["ids"]))
    assert f"lost ({len(gone['ids'])}): {named}" in done.stdout, done.stdout


def test_audit_dir_needs_with_index(dataset: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="with_index=True"):
        loader(dataset, tmp_path / "audit", with_index=False)


def test_a_state_saved_without_a_sink_needs_audit_resumed(dataset: str, tmp_path: Path) -> None:
    """R15: a state without the run's step count: the launch records an unknown resume point
    (the audit refuses, exit 2) until the trainer says it with ``audit_resumed(step)``."""
    plain = sk.ShardLoader(sk.StreamingDataset(dataset, batch_size=BATCH, seed=5, with_index=True))
    batches = iter(plain)
    next(batches)
    state = plain.state_dict()
    first = loader(dataset, tmp_path / "audit")
    next(iter(first))
    second = loader(dataset, tmp_path / "audit")
    second.load_state_dict(state)
    next(iter(second))
    done = shardkit_audit(str(tmp_path / "audit"), "--data", dataset)
    assert done.returncode == 2 and "audit_resumed" in done.stderr and "Traceback" not in done.stderr, done.stderr
    second.audit_resumed(1)
    assert json.loads((tmp_path / "audit" / "run001.json").read_text())["resumed_from_step"] == 1


def test_a_look_ahead_given_back_is_not_counted_twice(dataset: str, tmp_path: Path) -> None:
    """R10/R15: a batch handed over and given back with ``rewind`` (DevicePrefetcher's staged
    batch when the loop is left early) is handed over again when the epoch continues; the audit
    counts it once."""
    audit = tmp_path / "audit"
    first = loader(dataset, audit)
    batches = iter(first)
    for _ in range(3):
        next(batches)
    snapshot = first.consumed_snapshot()
    next(batches)  # staged, never trained
    first.rewind(snapshot)
    del batches
    for _ in first:  # epoch 0 continues at the boundary
        pass
    done = shardkit_audit(str(audit), "--data", dataset)
    assert done.returncode == 0 and "AUDIT OK" in done.stdout, done.stdout + done.stderr


def test_ranks_without_torch_distributed_are_refused(dataset: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch.distributed the ranks could not agree on a launch's run number."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="torch.distributed initialized"):
        iter(loader(dataset, tmp_path / "audit"))


def test_token_blocks_killed_and_resumed_audit_every_token_once(tmp_path: Path) -> None:
    """R15 with token blocks (TB1): the sink writes (document, position) pairs and the token
    settings; killed after a checkpoint and resumed with another seq_len, every token once."""
    data = str(tmp_path / "docs")
    with sk.ShardWriter(data, shard_size=300) as writer:
        for i in range(30):
            writer.write({"tokens": np.arange(1, 2 + i % 9, dtype=np.int32)})
    audit = tmp_path / "audit"

    def token_loader(seq_len: int) -> sk.ShardLoader:
        ds = sk.StreamingDataset(data, batch_size=2, tail="pad", with_index=True, tokens=sk.TokenBlocks(seq_len))
        return sk.ShardLoader(ds, audit_dir=audit)

    first = token_loader(8)
    batches = iter(first)
    next(batches), next(batches)
    state = json.loads(json.dumps(first.state_dict()))
    next(batches)  # lost with the kill
    second = token_loader(6)
    second.load_state_dict(state)
    for _ in second:
        pass
    assert json.loads((audit / "run000.json").read_text())["tokens"]["field"] == "tokens"
    done = shardkit_audit(str(audit), "--tokens", "--data", data)
    assert done.returncode == 0 and "AUDIT OK" in done.stdout, done.stdout + done.stderr
