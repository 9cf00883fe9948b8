"""When a reading process runs the read-ahead thread (``shardkit.read.ShardReader``): only with a
core to spare after every consumer and training process of the node has one."""

from __future__ import annotations

import pytest

from shardkit.loader import sample_batching


@pytest.mark.parametrize(
    ("cores", "local_ranks", "num_workers", "expected"),
    [
        (2, None, 0, True),  # the training process reads; one core left
        (2, None, 2, False),  # two workers + the trainer on two cores
        (2, "2", 0, False),  # two ranks reading on two cores
        (16, "4", 2, True),  # 4 ranks × (2 workers + trainer) = 12 < 16
        (16, "8", 1, False),  # 8 × 2 = 16: nothing spare
        (4, "junk", 0, True),  # an unreadable LOCAL_WORLD_SIZE counts as one rank
    ],
)
def test_spare_core(monkeypatch: pytest.MonkeyPatch, cores: int, local_ranks: str | None,
                    num_workers: int, expected: bool) -> None:
    monkeypatch.setattr(sample_batching.os, "sched_getaffinity", lambda pid: set(range(cores)))
    if local_ranks is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_ranks)
    assert sample_batching._spare_core(num_workers) is expected
