"""``order="global"`` on real ranks (torch.distributed gloo processes) and real DataLoader workers:
the same global batches on 1×4, 2×2 and 4×1 (ranks × workers) at ``B_g = 12``, and a job
SIGKILLed after a checkpoint and resumed on other topologies training every later global batch
of the uninterrupted run, bit for bit, each sample once per epoch (specs/partition.md P27, P30,
P31, P33, P35; specs/resume-state.md R16, R24)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

import shardkit as sk
from tests.helpers.datasets import write_dataset
from tests.helpers.global_jobs import GlobalJob, Launch, LaunchResult, global_batches, run_launch

pytestmark = pytest.mark.slow

SIZES = (37, 0, 51, 23, 40, 64, 29)  # 244 samples: 20 global batches of 12 per epoch, 4 dropped
SHAPES = ((1, 4), (2, 2), (4, 1))


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> GlobalJob:
    path = write_dataset(str(tmp_path_factory.mktemp("global") / "ds"), SIZES)
    return GlobalJob(path, global_batch=12, epochs=2, seed=7)


@pytest.fixture(scope="module")
def uninterrupted(job: GlobalJob, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, int], LaunchResult]:
    root = tmp_path_factory.mktemp("whole")
    return {shape: run_launch(job, Launch(*shape, group=2), None, str(root / f"{shape[0]}x{shape[1]}"))
            for shape in SHAPES}


def test_every_topology_trains_the_same_global_batches(
        job: GlobalJob, uninterrupted: dict[tuple[int, int], LaunchResult]) -> None:
    """P27, P30: 1×4, 2×2 and 4×1 give the identical sequence of global batches (ids, pad flags,
    row order) over two epochs, the same number of steps on every rank, equal to len(loader)."""
    reference = global_batches(uninterrupted[SHAPES[0]])
    assert len(reference) == 2 * (sum(SIZES) // job.global_batch)
    for shape, result in uninterrupted.items():
        assert global_batches(result) == reference, f"{shape[0]}x{shape[1]} trained other global batches"
        for rank, lengths in enumerate(result.lengths):
            steps = collections.Counter(epoch for epoch, _ in result.records[rank])
            assert lengths == dict(steps), f"{shape}: rank {rank} len(loader) {lengths}, took {dict(steps)}"
    assert reference[:20] != reference[20:], "epoch 1 repeated epoch 0's order"


def test_a_killed_job_resumed_on_other_topologies_continues_bit_for_bit(
        job: GlobalJob, uninterrupted: dict[tuple[int, int], LaunchResult], tmp_path: Path) -> None:
    """P31, R24: 1×4 checkpointed at step 5 and SIGKILLed (all ranks, workers mid-prefetch) two
    steps later; resumed on 2×2, checkpointed across the epoch boundary at its step 18 and
    SIGKILLed; resumed on 4×1 to the end. The global batches trained (up to each checkpoint,
    then the next launch's) are the uninterrupted run's, and every sample of each epoch is
    received exactly once but the plan's drop."""
    reference = global_batches(uninterrupted[SHAPES[0]])
    first = run_launch(job, Launch(1, 4, group=3, stop_after=5, kill_after=2), None, str(tmp_path / "a"))
    second = run_launch(job, Launch(2, 2, group=1, stop_after=18, kill_after=1), first.state, str(tmp_path / "b"))
    third = run_launch(job, Launch(4, 1, group=2), second.state, str(tmp_path / "c"))
    assert first.state is not None and second.state is not None
    assert first.state["plan"]["order"] == "global" and first.state["plan"]["position"] == 5 * job.global_batch
    trained = global_batches(first, 5) + global_batches(second, 18) + global_batches(third)
    assert len(trained) == len(reference)
    differ = [step for step, (got, want) in enumerate(zip(trained, reference, strict=True)) if got != want]
    assert not differ, f"global batches differ from the uninterrupted run's at steps {differ[:10]}"
    dataset = sk.StreamingDataset(job.path, batch_size=job.global_batch, order="global", seed=job.seed,
                                  shuffle_window=job.shuffle_window)
    for epoch in range(job.epochs):
        counts = collections.Counter(i for e, (ids, pads) in trained if e == epoch
                                     for i, pad in zip(ids, pads, strict=True) if not pad)
        assert max(counts.values()) == 1, f"epoch {epoch}: a sample received twice"
        dropped = set(dataset.plan(epoch, 1, 0).dropped_indices().tolist())
        assert set(counts) | dropped == set(range(sum(SIZES))) and not set(counts) & dropped
