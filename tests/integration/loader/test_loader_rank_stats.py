"""``loader.stats(gather=True)``: the cross-rank view (G10, loader/rank_stats.py) on real gloo
ranks, one of them slowed by a sleeping transform: every rank gets the same report, and it
names the slow rank and its host."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from shardkit.loader.rank_stats import find_straggler
from tests.integration.loader.rank_stats_job import stats_rank

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch.utils.data.dataloader")


@pytest.mark.slow
@pytest.mark.parametrize("slow_rank", [0, 2])
def test_gathered_stats_name_the_rank_slowed_by_its_transform(
    uneven_dataset: str, tmp_path: Path, slow_rank: int
) -> None:
    world = 3
    mp.spawn(stats_rank, args=(world, uneven_dataset, str(tmp_path), slow_rank, 1), nprocs=world, join=True)
    reports = [json.loads((tmp_path / f"stats{r}.json").read_text()) for r in range(world)]
    assert all(report == reports[0] for report in reports)  # collective: one view on every rank
    ranks, straggler = reports[0]["ranks"], reports[0]["straggler"]
    assert [r["rank"] for r in ranks] == list(range(world))
    assert straggler is not None and straggler["rank"] == slow_rank, ranks
    assert straggler["host"] == socket.gethostname()
    slow = ranks[slow_rank]["wait_fraction"]
    assert all(slow > r["wait_fraction"] for r in ranks if r["rank"] != slow_rank)
    assert all(r["slowest_shard"] is None or r["slowest_shard"].startswith("shards/") for r in ranks)


def _rank(rank: int, fraction: float) -> dict[str, object]:
    return {"rank": rank, "host": f"h{rank}", "wait_fraction": fraction, "slowest_shard": None}


def test_no_straggler_when_ranks_wait_alike_or_little() -> None:
    assert find_straggler([_rank(0, 0.30), _rank(1, 0.35), _rank(2, 0.32)]) is None
    assert find_straggler([_rank(0, 0.001), _rank(1, 0.04)]) is None  # below STRAGGLER_MIN
    assert find_straggler([]) is None
    found = find_straggler([_rank(0, 0.02), _rank(1, 0.6), _rank(2, 0.03)])
    assert found is not None and (found["rank"], found["host"]) == (1, "h1")
