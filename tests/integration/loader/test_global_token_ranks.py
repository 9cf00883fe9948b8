"""Token blocks in ``order="global"`` on real ranks (torch.distributed gloo processes) and real
DataLoader workers: the same global batches of blocks on 1×4, 2×2 and 4×1 (ranks × workers) at
``B_g = 4`` blocks of 16 positions, and a job SIGKILLed after a checkpoint and resumed on other
topologies training every later global batch of the uninterrupted run, slot for slot, each
token position of each epoch an input once but the planned tail (specs/token-blocks.md
TB30-TB33)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

import shardkit as sk
from tests.helpers.global_jobs import GlobalJob, Launch, LaunchResult, global_batches, run_launch
from tests.helpers.token_data import dropped_pairs, epoch_pairs, write_token_dataset

pytestmark = pytest.mark.slow

# 56 documents, 728 positions with EOS: 11 global batches of 4 × 16 an epoch
LENGTHS = [3, 0, 41, 7, 12, 1, 25, 9, 0, 18, 5, 33, 2, 14] * 4
TOKENS = sk.TokenBlocks(16, eos_id=2)
SHAPES = ((1, 4), (2, 2), (4, 1))


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> GlobalJob:
    path = write_token_dataset(str(tmp_path_factory.mktemp("global_tokens") / "ds"), LENGTHS, shard_size=9)
    return GlobalJob(path, global_batch=4, epochs=2, seed=7, shuffle_window=8, tokens=TOKENS)


@pytest.fixture(scope="module")
def uninterrupted(job: GlobalJob, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, int], LaunchResult]:
    root = tmp_path_factory.mktemp("whole")
    return {shape: run_launch(job, Launch(*shape, group=2), None, str(root / f"{shape[0]}x{shape[1]}"))
            for shape in SHAPES}


def steps_per_epoch() -> int:
    return sum(n + 1 for n in LENGTHS if n) // (4 * 16)


def test_every_topology_trains_the_same_global_batches_of_blocks(
        job: GlobalJob, uninterrupted: dict[tuple[int, int], LaunchResult]) -> None:
    """TB30, TB31: 1×4, 2×2 and 4×1 give the identical global batches (every slot's document and
    offset) over two epochs, the same steps on every rank, equal to len(loader)."""
    reference = global_batches(uninterrupted[SHAPES[0]])
    assert len(reference) == 2 * steps_per_epoch()
    for shape, result in uninterrupted.items():
        assert global_batches(result) == reference, f"{shape[0]}x{shape[1]} trained other global batches"
        for rank, lengths in enumerate(result.lengths):
            steps = collections.Counter(epoch for epoch, _ in result.records[rank])
            assert lengths == dict(steps), f"{shape}: rank {rank} len(loader) {lengths}, took {dict(steps)}"
    assert reference[: steps_per_epoch()] != reference[steps_per_epoch():], "epoch 1 repeated epoch 0's order"


def test_a_killed_token_job_resumed_on_other_topologies_continues_bit_for_bit(
        job: GlobalJob, uninterrupted: dict[tuple[int, int], LaunchResult], tmp_path: Path) -> None:
    """TB33: 1×4 checkpointed at step 5 and SIGKILLed two steps later; resumed on 2×2,
    checkpointed across the epoch boundary and SIGKILLed; resumed on 4×1 to the end. The global
    batches trained are the uninterrupted run's, and each epoch's token positions are inputs
    exactly once but the plan's drop tail."""
    reference = global_batches(uninterrupted[SHAPES[0]])
    across = steps_per_epoch() + 2 - 5
    first = run_launch(job, Launch(1, 4, group=3, stop_after=5, kill_after=2), None, str(tmp_path / "a"))
    second = run_launch(job, Launch(2, 2, group=1, stop_after=across, kill_after=1), first.state, str(tmp_path / "b"))
    third = run_launch(job, Launch(4, 1, group=2), second.state, str(tmp_path / "c"))
    assert first.state is not None and second.state is not None
    assert first.state["plan"]["order"] == "global" and first.state["plan"]["position"] == 5 * 4 * 16
    trained = global_batches(first, 5) + global_batches(second, across) + global_batches(third)
    differ = [step for step, (got, want) in enumerate(zip(trained, reference, strict=True)) if got != want]
    assert len(trained) == len(reference) and not differ, f"global batches differ at steps {differ[:10]}"
    dataset = sk.StreamingDataset(job.path, batch_size=4, order="global", seed=job.seed, tokens=TOKENS,
                                  shuffle_window=job.shuffle_window)
    for epoch in range(job.epochs):
        seen = collections.Counter((s, o) for e, (ids, offsets) in trained if e == epoch
                                   for s, o in zip(ids, offsets, strict=True) if s >= 0)
        dropped = dropped_pairs(dataset.step_plan(epoch, 1, 0))
        assert max(seen.values()) == 1 and seen + dropped == epoch_pairs(LENGTHS, TOKENS), f"epoch {epoch}"
