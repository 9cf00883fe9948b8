"""Data-parallel groups on real gloo processes (specs/partition.md P22-P26): with tensor
parallelism only the data-parallel rank and size partition the data, the replicas of one
data-parallel rank receive byte-identical batches, ``state_dict()`` and ``stats(gather=True)``
gather over every process with the replicas checked, and a job SIGKILLed as TP=2 × DP=2
resumes as TP=2 × DP=1 and then TP=1 × DP=4 with every sample (token position) of the epoch
received exactly once by the data-parallel ranks together."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import shardkit as sk
from shardkit.loader.resume_check import SLOTS
from shardkit.plan.tokens.plan import epoch_order
from tests.helpers.datasets import write_dataset
from tests.helpers.dp_ranks import TOKENS, DPJob, RankResult, run_job
from tests.helpers.token_data import epoch_pairs, write_token_dataset

pytestmark = pytest.mark.slow
SIZES = (20, 0, 17, 23)  # 60 samples
LENGTHS = [(i * 37) % 41 for i in range(40)]  # 0 … 40 tokens, empty documents included


def _replicas(results: list[RankResult], tp: int) -> list[RankResult]:
    """One result per data-parallel rank, after checking its ``tp`` replicas received the same
    batches, byte for byte (P23), and every process saved the same state."""
    readers = [r for r in results if r.length > 0 or r.steps]
    states = {repr(r.state) for r in results}
    assert len(states) == 1, "state_dict() differs between processes"
    chosen = []
    for dp in range(len(readers) // tp):
        group = readers[dp * tp:(dp + 1) * tp]
        digests = [[step["digest"] for step in r.steps] for r in group]
        assert all(d == digests[0] for d in digests), (
            f"replicas {[r.rank for r in group]} of data-parallel rank {dp} received different batches")
        assert digests[0], f"data-parallel rank {dp} received nothing"
        chosen.append(group[0])
    return chosen


def _received(results: list[RankResult], tp: int) -> Counter[Any]:
    return Counter(tuple(i) if isinstance(i, list) else i
                   for r in _replicas(results, tp) for step in r.steps for i in step["ids"])


@pytest.mark.parametrize("how", ["group", "options"])
def test_tp2_dp2_replicas_get_identical_batches_and_the_dp_union_is_the_epoch(tmp_path: Path, how: str) -> None:
    """P22, P23: 4 processes as TP=2 × DP=2 (the data-parallel group as a ``ProcessGroup``, or
    the documented ``StreamOptions`` override): each TP pair receives the same batches, the two
    data-parallel ranks together every sample once, and ``len(loader)`` is the DP=2 plan's."""
    path = write_dataset(str(tmp_path / "ds"), SIZES)
    results = run_job(DPJob(path, tp=2, dp=2, how=how), str(tmp_path / "job"))
    assert _received(results, 2) == Counter(range(60))
    assert all(r.length == len(r.steps) == 10 for r in results)  # 60 / (2 DP ranks × batch 3)
    assert results[0].state is not None and results[0].state["plan"]["params"]["world_size"] == 2
    ranks = results[0].stats["ranks"]  # type: ignore[index]
    assert [(e["rank"], e["data_parallel_rank"], e["reads"]) for e in ranks] == [
        (0, 0, True), (1, 0, True), (2, 1, True), (3, 1, True)]


CHAINS = [("tokens", "group"), ("mixture", "mesh")]


@pytest.mark.parametrize(("kind", "how"), CHAINS)
def test_killed_as_tp2_dp2_resumed_as_tp2_dp1_then_tp1_dp4_receives_the_epoch_once(
        tmp_path: Path, kind: str, how: str) -> None:
    """P22-P24 and G6: SIGKILLed mid-epoch (workers alive) as TP=2 × DP=2, resumed as TP=2 ×
    DP=1 (the TP size kept, the DP size changed), SIGKILLed again, finished as TP=1 × DP=4 (both
    changed): over the chain the data-parallel ranks receive the epoch exactly once — every
    token position of a token-block dataset, or a mixture's epoch multiset."""
    if kind == "tokens":
        data: str | sk.Mixture = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
        want = epoch_pairs(LENGTHS, TOKENS)
    else:
        sources = [sk.Source(write_dataset(str(tmp_path / f"s{i}"), sizes), weight=w, name=f"s{i}")
                   for i, (sizes, w) in enumerate([((20, 13), 0.7), ((9,), 0.3)])]
        data = sk.Mixture(sources, samples_per_epoch=50)
        reference = sk.StreamingDataset(data, batch_size=1, seed=7, tail="drop", shuffle_window=8)
        want = Counter(int(i) for i in epoch_order(reference.plan(0, 1, 0)))
    tokens = kind == "tokens"
    first = run_job(DPJob(data, 2, 2, tokens, how=how, stop_after=2), str(tmp_path / "a"))
    second = run_job(DPJob(data, 2, 1, tokens, how=how, stop_after=3), str(tmp_path / "b"), first[0].state)
    third = run_job(DPJob(data, 1, 4, tokens, how=how), str(tmp_path / "c"), second[0].state)
    got = _received(first, 2) + _received(second, 2) + _received(third, 1)
    assert got == want, f"twice: {sorted(k for k, n in got.items() if n > 1)[:10]}, missing: {len(want - got)}"
    so_far: Counter[Any] = Counter()
    for results, tp, dp in ((first, 2, 2), (second, 2, 1)):
        state = results[0].state
        assert state is not None and state["plan"]["params"]["world_size"] == dp
        so_far += _received(results, tp)
        if kind == "mixture":  # per-source counts summed over one replica per data-parallel rank
            assert sum(e["consumed"] for e in state["mixture"]["sources"]) == sum(so_far.values())


def test_replicas_that_disagree_make_state_dict_raise_naming_the_ranks(tmp_path: Path) -> None:
    """P24: two replicas of one data-parallel rank at different boundaries (rank 1 took one
    more batch): ``state_dict()`` raises a ``StateError`` naming both ranks on both, no hang."""
    path = write_dataset(str(tmp_path / "ds"), SIZES)
    results = run_job(DPJob(path, tp=2, dp=1, workers=0, how="tuple", stop_after=2, extra_step=(1,)),
                      str(tmp_path / "job"))
    for result in results:
        assert result.error is not None and "ranks 0 and 1 are replicas of data-parallel rank 0" in result.error


def test_a_rank_that_needs_no_data_reads_nothing_and_takes_part_in_the_collectives(tmp_path: Path) -> None:
    """P26: a third process (a pipeline stage without inputs) says ``reads=False``: its loader
    yields nothing, ``len()`` is 0, it decodes no byte and starts no worker, and it takes part
    in ``state_dict()`` (the same state as the readers') and ``stats(gather=True)``."""
    path = write_dataset(str(tmp_path / "ds"), SIZES)
    results = run_job(DPJob(path, tp=1, dp=2, how="tuple", no_data=(2,)), str(tmp_path / "job"))
    quiet = results[2]
    assert quiet.steps == [] and quiet.length == 0
    assert quiet.state == results[0].state == results[1].state
    assert _received(results[:2], 1) == Counter(range(60))
    ranks = quiet.stats["ranks"]  # type: ignore[index]
    assert [(e["rank"], e["reads"]) for e in ranks] == [(0, True), (1, True), (2, False)]
    assert ranks[2]["steps"] == 0 and quiet.stats["decoded_bytes_per_s"] == 0  # type: ignore[index]


def test_a_process_with_other_num_workers_is_an_error_naming_the_lengths(tmp_path: Path) -> None:
    """P24: the no-data rank made with 2 workers against the readers' 1: every process raises a
    ``StateError`` naming each rank's row length, instead of a failed (or hung) collective."""
    path = write_dataset(str(tmp_path / "ds"), SIZES)
    results = run_job(DPJob(path, tp=1, dp=2, how="tuple", no_data=(2,), no_data_workers=2),
                      str(tmp_path / "job"))
    # a row: the steps, then per consumer its offset and its next batch's head (R18, SLOTS + 1 ints)
    one, two = 1 + 1 * (2 + SLOTS), 1 + 2 * (2 + SLOTS)
    for result in results:
        assert result.error is not None and f"different lengths {{0: {one}, 1: {one}, 2: {two}}}" in result.error
        assert "every process needs the same num_workers" in result.error


def test_the_audit_sink_writes_one_file_per_data_parallel_rank_and_audits_a_resumed_chain(tmp_path: Path) -> None:
    """R15 with replicas (P22) and a rank that reads nothing (P26): killed as TP=2 × DP=2 (+1
    process without data), resumed as TP=1 × DP=3; one writer per data-parallel rank, the
    collective run number agreed by all processes, and ``shardkit audit`` exits 0."""
    from tests.helpers.trainer_jobs import shardkit_audit

    path = write_dataset(str(tmp_path / "ds"), (20, 0, 17, 23))
    audit = str(tmp_path / "audit")
    first = run_job(DPJob(path, tp=2, dp=2, how="tuple", stop_after=2, no_data=(4,), audit_dir=audit),
                    str(tmp_path / "a"))
    assert first[0].state is not None and first[0].state["audit_step"] == 2
    run_job(DPJob(path, tp=1, dp=3, how="tuple", audit_dir=audit), str(tmp_path / "b"), first[0].state)
    assert sorted(p.name for p in Path(audit).iterdir()) == [
        "run000-rank0.jsonl", "run000-rank1.jsonl", "run000.json",
        "run001-rank0.jsonl", "run001-rank1.jsonl", "run001-rank2.jsonl", "run001.json"]
    done = shardkit_audit(audit, "--data", path)
    assert done.returncode == 0 and "AUDIT OK" in done.stdout, done.stdout + done.stderr
