"""``ShardLoader`` on real gloo process groups: R ranks × W DataLoader workers per rank.

Every rank is a real process (``torch.distributed`` initialised with gloo over a FileStore),
each with ``W`` real worker processes; each rank records every (step, sample index) it
receives. Cites G2 in docs/guarantees.md (exactly once across ranks), G3 (equal steps per rank, no hang at epoch
end), G4 (several epochs with persistent workers) and specs/partition.md P1-P3, P9.
"""

from __future__ import annotations

import pytest

from tests.helpers.resume import DataSpec, Segment, Shape, check_chain, run_chain

pytestmark = pytest.mark.slow
NUM_EPOCHS = 2

# (world_size, num_workers, batch_size, tail): a representative spread of R ∈ 1..4, W ∈ 0..3,
# including more consumers than batches (only pads, or nothing, for some consumers).
SMALL_SHAPES = [
    (2, 2, 3, "drop"),  # specs/partition.md's worked example: 23 samples, 2 × 2 consumers, batch 3
    (2, 2, 3, "pad"),
    (3, 1, 2, "pad"),
    (3, 0, 4, "pad"),
    (4, 0, 1, "drop"),
    (4, 3, 2, "pad"),  # 12 consumers for 23 samples, one pad
    (2, 3, 5, "drop"),  # 2 steps per rank over 3 workers: worker 2 yields nothing
    (1, 3, 5, "drop"),
]
UNEVEN_SHAPES = [
    (2, 3, 16, "pad"),
    (3, 2, 8, "drop"),
    (4, 1, 16, "pad"),
    (4, 3, 8, "drop"),
    (2, 1, 5, "pad"),
    (3, 0, 16, "pad"),
    (1, 2, 32, "drop"),
]


def run_job(path: str, num_samples: int, shape: tuple[int, int, int, str], workdir: str) -> list:
    world, workers, batch, tail = shape
    data = DataSpec(path, num_samples, tail=tail, seed=3, shuffle_window=32)
    segment = Segment(Shape(world, workers, batch, persistent_workers=workers > 0))
    results = run_chain(data, [segment], NUM_EPOCHS, workdir, processes=True)
    check_chain(data, results, NUM_EPOCHS)  # exactly once, equal steps == len, plan order
    return results


@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=str)
def test_small_dataset_on_gloo_ranks(small_dataset: str, shape: tuple, tmp_path: object) -> None:
    """G2/G3 on 23 samples in [5, 0, 7, 3, 8] for two epochs with persistent workers."""
    results = run_job(small_dataset, 23, shape, str(tmp_path))
    world, workers, batch, tail = shape
    steps = [len(r.batches) for r in results[0].ranks[0]]
    want = -(-23 // (world * batch)) if tail == "pad" else 23 // (world * batch)  # P3
    assert steps == [want] * NUM_EPOCHS
    if shape == (2, 2, 3, "drop"):
        assert want == 3  # the worked example: naive per-worker drop_last gave rank 0 four, rank 1 three


@pytest.mark.parametrize("shape", UNEVEN_SHAPES, ids=str)
def test_uneven_shards_on_gloo_ranks(uneven_dataset: str, shape: tuple, tmp_path: object) -> None:
    """G2/G3 on 1001 samples in 7 shards of 400, 1, 0, 257, 13, 300, 30 samples."""
    run_job(uneven_dataset, 1001, shape, str(tmp_path))
