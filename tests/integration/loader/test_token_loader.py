"""Token blocks through real DataLoader workers and real gloo ranks (specs/token-blocks.md TB5,
TB7, TB8, TB13): killed mid-epoch, resumed on another topology, batch size and seq_len, every
(document, position) of the epoch is consumed exactly once."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import shardkit as sk
from shardkit.plan.tokens.plan import epoch_order
from tests.helpers.token_data import (
    consumed_pairs,
    dropped_pairs,
    epoch_pairs,
    order_of,
    order_pairs,
    write_token_dataset,
    write_token_mixture,
)

pytestmark = pytest.mark.slow
LENGTHS = [(i * 37) % 61 for i in range(90)]  # 0 … 60 tokens, empty documents included
TOKENS = sk.TokenBlocks(16, eos_id=2, bos_id=1)


def _dataset(path: str | sk.Mixture, batch_size: int, tokens: sk.TokenBlocks, **kwargs) -> sk.StreamingDataset:
    return sk.StreamingDataset(path, batch_size=batch_size, tokens=tokens, with_index=True, seed=5, tail="pad",
                               **kwargs)


def _take(loader: sk.ShardLoader, steps: int | None) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    batches = iter(loader)
    while steps is None or steps > 0:
        batch = next(batches, None)
        if batch is None:
            break
        pairs += consumed_pairs(batch)
        steps = None if steps is None else steps - 1
    return pairs


def _finish_exactly_once(path: str, first: list[tuple[int, int]], state: dict, batch_size: int,
                         tokens: sk.TokenBlocks, workers: int = 0) -> None:
    """Finish the epoch from ``state``: with the ``first`` pairs read before it was saved, every
    (document, position) of the epoch is consumed once, except the resumed plan's drop."""
    ds = _dataset(path, batch_size, tokens)
    loader = sk.ShardLoader(ds, num_workers=workers)
    loader.load_state_dict(json.loads(json.dumps(state)))
    got = Counter(first) + Counter(_take(loader, None))
    assert max(got.values()) == 1
    assert got + dropped_pairs(ds.step_plan(0, 1, workers, state["plan"])) == epoch_pairs(LENGTHS, TOKENS)


def test_two_workers_killed_then_resumed_elastically_with_another_seq_len(tmp_path):
    """W=2 workers (groups of batches, shared ring) → W=0 with batch 3 and seq_len 7."""
    path = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
    loader = sk.ShardLoader(_dataset(path, 2, TOKENS), num_workers=2, batches_per_transfer=2)
    first = _take(loader, 5)
    state = loader.state_dict()
    _finish_exactly_once(path, first, state, 3, sk.TokenBlocks(7, eos_id=2, bos_id=1))


def test_token_blocks_over_a_weighted_dataset_through_two_workers_killed_and_resumed(tmp_path):
    """SW11: token blocks over a weighted epoch source (sample_weights=, SW1) through W=2, killed
    and resumed on W=1 with another batch size and seq_len: every position of every element of the
    weighted multiset (a sample twice in it: two documents) consumed once per occurrence."""
    path = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
    weights = {"sample_weights": [float(i % 4) for i in range(len(LENGTHS))], "samples_per_epoch": 120}
    ds = _dataset(path, 2, TOKENS, **weights)
    order = order_of(ds)
    assert max(Counter(order).values()) > 1  # the weighted epoch repeats samples
    loader = sk.ShardLoader(ds, num_workers=2, batches_per_transfer=2)
    first = _take(loader, 7)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["sample_weights"]["samples_per_epoch"] == 120 and "tokens" in state
    tokens = sk.TokenBlocks(11, eos_id=2, bos_id=1)
    resumed_ds = _dataset(path, 3, tokens, **weights)
    resumed = sk.ShardLoader(resumed_ds, num_workers=1)
    resumed.load_state_dict(state)
    got = Counter(first) + Counter(_take(resumed, None))
    dropped = dropped_pairs(resumed_ds.step_plan(0, 1, 1, state["plan"]))
    assert got + dropped == order_pairs(order, LENGTHS, TOKENS)


def test_two_workers_resume_the_same_batches_on_the_same_topology(tmp_path):
    """TB5, L4: a W=2 state resumed with W=2 yields the uninterrupted run's remaining batches."""
    path = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
    whole = [b["input_ids"] for b in sk.ShardLoader(_dataset(path, 2, TOKENS), num_workers=2)]
    loader = sk.ShardLoader(_dataset(path, 2, TOKENS), num_workers=2)
    _take(loader, 3)
    resumed = sk.ShardLoader(_dataset(path, 2, TOKENS), num_workers=2)
    resumed.load_state_dict(json.loads(json.dumps(loader.state_dict())))
    rest = [b["input_ids"] for b in resumed]
    assert len(rest) == len(whole) - 3
    assert all(torch.equal(a, b) for a, b in zip(rest, whole[3:], strict=True))


def _rank_main(rank: int, world: int, path: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=rank, world_size=world)
    try:
        loader = sk.ShardLoader(_dataset(path, 2, TOKENS), num_workers=1)
        pairs = _take(loader, 2 + rank)  # ranks stop at different steps; the state is collective
        state = loader.state_dict()
        Path(out, f"pairs-{rank}.json").write_text(json.dumps(pairs))
        if rank == 0:
            Path(out, "state.json").write_text(json.dumps(state))
    finally:
        dist.destroy_process_group()


def test_gloo_ranks_killed_then_resumed_on_one_rank(tmp_path):
    """2 gloo ranks × 1 worker save one collective state; 1 rank (W=0, batch 1) finishes the epoch."""
    path = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
    out = str(tmp_path / "out")
    os.makedirs(out)
    mp.spawn(_rank_main, args=(2, path, out), nprocs=2, join=True)
    first = [tuple(p) for r in range(2) for p in json.loads(Path(out, f"pairs-{r}.json").read_text())]
    state = json.loads(Path(out, "state.json").read_text())
    assert state["plan"]["params"]["world_size"] == 2 and len(state["tokens"]["levels"]) == 1
    _finish_exactly_once(path, first, state, 1, sk.TokenBlocks(32, eos_id=2, bos_id=1))


def test_persistent_workers_read_every_position_once_in_each_epoch(tmp_path):
    """G4 for token blocks: epochs follow one another on persistent workers, each complete."""
    path = write_token_dataset(str(tmp_path / "ds"), LENGTHS)
    loader = sk.ShardLoader(_dataset(path, 2, TOKENS), num_workers=2, persistent_workers=True)
    orders = []
    for _ in range(2):
        pairs = _take(loader, None)
        assert Counter(pairs) == epoch_pairs(LENGTHS, TOKENS)
        orders.append(pairs)
    assert orders[0] != orders[1]  # each epoch its own order (TB11)


def test_a_token_mixture_through_workers_killed_then_resumed_elastically(tmp_path):
    """TB15-TB17: token blocks over a 3-source mixture (a source repeated within the epoch) from
    W=2 workers, killed, resumed with W=0, another batch size and seq_len: every (sample,
    position) of the epoch multiset once; the per-source counts of the state add up."""
    mix, lengths = write_token_mixture(str(tmp_path), [(LENGTHS[:50], 0.6), (LENGTHS[50:80], 0.3),
                                                       (LENGTHS[80:84], 0.1)], samples_per_epoch=90)
    loader = sk.ShardLoader(_dataset(mix, 2, TOKENS), num_workers=2, batches_per_transfer=2)
    first = _take(loader, 5)
    state = json.loads(json.dumps(loader.state_dict()))
    assert sum(e["consumed_tokens"] for e in state["mixture"]["sources"]) == len(first)
    resumed = sk.ShardLoader(_dataset(mix, 3, sk.TokenBlocks(7, eos_id=2, bos_id=1)))
    resumed.load_state_dict(state)
    got = Counter(first) + Counter(_take(resumed, None))
    assert got == order_pairs(order_of(resumed.streaming), lengths, TOKENS)  # pad tail: nothing dropped
    final = resumed.state_dict()["mixture"]["sources"]
    assert [e["consumed_tokens"] for e in final] == [
        sum(c for (s, _), c in got.items() if lo <= s < hi) for lo, hi in ((0, 50), (50, 80), (80, 84))]


def test_a_token_mixture_on_persistent_workers_cuts_each_epochs_multiset(tmp_path):
    """TB15, MX2: epoch 1 continues every source's stream (the sample mixture's plan of epoch 1
    is the reference), pack mode, on the same persistent workers."""
    mix, lengths = write_token_mixture(str(tmp_path), [(LENGTHS[:30], 0.6), (LENGTHS[30:39], 0.4)],
                                       samples_per_epoch=40)
    tokens = sk.TokenBlocks(16, mode="pack", eos_id=2)
    loader = sk.ShardLoader(_dataset(mix, 2, tokens), num_workers=2, persistent_workers=True)
    reference = sk.StreamingDataset(mix, batch_size=1, seed=5, tail="drop")  # the sample mixture's plan
    for epoch in range(2):
        got = Counter(_take(loader, None))
        order = [int(i) for i in epoch_order(reference.plan(epoch, 1, 0))]
        assert got == order_pairs(order, lengths, tokens)
