"""Pack mode's step count shared among real gloo ranks (specs/token-blocks.md TB29, TB28): each
rank's loader counts only its own consumers' blocks and the ranks agree on ``K`` with one
all-reduce at ``iter(loader)``; the steps are those of the plan that counts every consumer, and
the collective ``state_dict()`` (consumers' reported cutter states gathered over the ranks)
equals the state computed from the offsets."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

import shardkit as sk
from shardkit.plan.tokens import pool
from tests.helpers.token_data import write_token_dataset

pytestmark = pytest.mark.slow
LENGTHS = [(i * 53) % 97 for i in range(120)]  # 0 … 96 tokens: the two ranks' groups pack differently


def _tokens() -> sk.TokenBlocks:
    return sk.TokenBlocks(32, mode="pack", eos_id=2, open_blocks=2)


def _dataset(path: str, tail: str) -> sk.StreamingDataset:
    return sk.StreamingDataset(path, batch_size=2, tokens=_tokens(), tail=tail, seed=7)


def _rank_main(rank: int, world: int, path: str, out: str, tail: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=rank, world_size=world)
    try:
        counted: list[int] = []
        original = pool.count_blocks
        pool.count_blocks = lambda pieces, options: counted.append(len(pieces)) or original(pieces, options)
        loader = sk.ShardLoader(_dataset(path, tail), num_workers=1)
        whole = [b["input_ids"].tolist() for b in loader]
        num_blocks, first = loader.streaming.step_plan(0, world, 1).level.split.num_blocks, len(counted)
        again = sk.ShardLoader(_dataset(path, tail), num_workers=1)
        steps = len(again) if rank == 0 else None  # one rank plans first, alone: no collective there
        batches = iter(again)  # ... and both make the same one here
        for _ in range(1 + rank):  # ranks stop at different steps; the state is collective
            next(batches)
        state = again.state_dict()
        result = {"whole": whole, "num_blocks": num_blocks, "counted": first, "state": state, "steps": steps}
        Path(out, f"rank-{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("tail", ["drop", "pad"])
def test_gloo_ranks_count_their_own_consumers_and_agree_on_the_steps(tmp_path, tail):
    """TB29: 2 gloo ranks × 1 worker: each rank counts one consumer (the loader, not every
    consumer), both get the ``K`` of the plan counting both, and each rank's batches are those it
    reads without sharing the count, also when one rank planned alone before (``len(loader)``);
    TB28: the gathered state is the one computed from the offsets."""
    path = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
    out = str(tmp_path / "out")
    os.makedirs(out)
    mp.spawn(_rank_main, args=(2, path, out, tail), nprocs=2, join=True)
    results = [json.loads(Path(out, f"rank-{r}.json").read_text()) for r in range(2)]
    reference = _dataset(path, tail)
    plan = reference.step_plan(0, 2, 1)  # no torch.distributed here: every consumer counted
    counts = [pool.count_blocks(w.pieces, plan.level.options) for w in plan.level.split.consumers]
    assert counts[0] != counts[1]  # the agreement decides something
    for rank, result in enumerate(results):
        assert result["num_blocks"] == plan.level.split.num_blocks
        assert result["counted"] == 1
        ds = _dataset(path, tail)
        ds.options = replace(ds.options, rank=rank, world_size=2)
        assert result["whole"] == [b["input_ids"].tolist() for b in sk.ShardLoader(ds, num_workers=1)]
    assert results[0]["steps"] == len(results[0]["whole"])
    state = results[0]["state"]
    assert state == results[1]["state"] and state["plan"]["offsets"] == [2, 4]
    assert state["tokens"] == reference.extra_state(plan, [2, 4])["tokens"]
