"""``ShardLoader`` with real DataLoader worker processes, in one training process.

Cites G2 (docs/guarantees.md) (exactly once per epoch), G3 (equal steps, minimal reported tail, pads
flagged), G4 (seeded per epoch; ``set_epoch`` reaches persistent workers) and specs/partition.md
P1-P4, P7, P9. Datasets: tests/helpers/datasets.py (23 samples in [5, 0, 7, 3, 8]; 1001 in
[400, 1, 0, 257, 13, 300, 30]).
"""

from __future__ import annotations

import collections
import gc
import logging
from typing import Any

import pytest
import torch

import shardkit as sk
from shardkit.loader import shard_loader
from tests.helpers.datasets import check_delivered_sample
from tests.helpers.resume import (
    PIN_WITHOUT_ACCELERATOR,
    TOO_MANY_WORKERS,
    assign_to_consumers,
    pad_ids,
    real_ids,
    to_record,
)

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)


def loader_for(path: str, *, batch_size: int, num_workers: int, tail: str = "pad",
               shuffle: bool = True, **options: Any) -> sk.ShardLoader:
    dataset = sk.StreamingDataset(path, batch_size=batch_size, shuffle=shuffle, seed=7, tail=tail,
                                  shuffle_window=8, with_index=True)
    return sk.ShardLoader(dataset, num_workers=num_workers, **options)


def run_epoch(loader: sk.ShardLoader, epoch: int, check_contents: bool = True) -> list[Any]:
    """One epoch: asserts len(loader), full batches, contents and per-consumer plan order."""
    loader.set_epoch(epoch)
    expected_steps = len(loader)
    batch_size = loader.streaming.params.batch_size
    records = []
    for batch in loader:
        assert len(batch["id"]) == batch_size  # P2: every batch is full
        if check_contents:
            for row in range(batch_size):
                check_delivered_sample(batch, row)
        records.append(to_record(batch))
    assert len(records) == expected_steps, "len(loader) must equal the batches yielded (G3)"
    plan = loader.streaming.plan(epoch, 1, loader.num_workers)
    assert len(records) == plan.steps_per_rank
    taken = assign_to_consumers(plan, 0, records)  # P9: each consumer in plan order
    assert all(taken.get(c, 0) == plan.num_batches(c) for c in range(plan.num_consumers))
    return records


def check_exactly_once(records: list[Any], num_samples: int, plan: Any, tail: str) -> None:
    """P1/P3/P4: real samples at most once; pad → all of them, pads flagged repeats; drop →
    exactly the reported ``num_dropped`` missing."""
    real = collections.Counter(real_ids(records))
    pads = pad_ids(records)
    assert max(real.values(), default=1) == 1, "a sample was yielded twice"
    assert set(real) <= set(range(num_samples))
    if tail == "pad":
        assert set(real) == set(range(num_samples))
        assert len(pads) == plan.num_padded < plan.params.world_size * plan.params.batch_size
        assert set(pads) <= set(range(num_samples))
    else:
        assert not pads
        assert num_samples - len(real) == plan.num_dropped < plan.params.batch_size


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
@pytest.mark.parametrize("tail", ["drop", "pad"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_small_dataset_every_sample_once_per_epoch(small_dataset: str, num_workers: int,
                                                   tail: str, shuffle: bool) -> None:
    """G2/G3 on specs/partition.md's worked example (23 samples, an empty shard among them), B = 3:
    each sample once,
    ragged, bytes and str fields intact; unshuffled, the real samples come in manifest order
    per consumer (P7)."""
    loader = loader_for(small_dataset, batch_size=3, num_workers=num_workers, tail=tail,
                        shuffle=shuffle)
    records = run_epoch(loader, 0)
    plan = loader.streaming.plan(0, 1, num_workers)
    check_exactly_once(records, 23, plan, tail)
    if not shuffle:
        owned = sorted(real_ids(records))
        assert owned == list(range(23 - plan.num_dropped))  # P7: the dropped tail is the end


@pytest.mark.parametrize(("num_workers", "tail", "batch_size"),
                         [(0, "drop", 16), (1, "pad", 7), (2, "drop", 5), (3, "pad", 16)])
def test_uneven_shards_every_sample_once_per_epoch(uneven_dataset: str, num_workers: int,
                                                   tail: str, batch_size: int) -> None:
    """G2/G3 over 7 shards of 400, 1, 0, 257, 13, 300 and 30 samples."""
    loader = loader_for(uneven_dataset, batch_size=batch_size, num_workers=num_workers, tail=tail)
    records = run_epoch(loader, 0, check_contents=num_workers < 2)
    check_exactly_once(records, 1001, loader.streaming.plan(0, 1, num_workers), tail)


@pytest.mark.parametrize("num_workers", [1, 3])
def test_persistent_workers_follow_set_epoch(small_dataset: str, num_workers: int) -> None:
    """G4: the same worker processes serve several epochs and still yield each epoch's own
    plan (``set_epoch`` reaches them through the control block); epochs differ (P6)."""
    loader = loader_for(small_dataset, batch_size=2, num_workers=num_workers,
                        persistent_workers=True)
    orders = []
    workers = None
    for epoch in range(3):
        records = run_epoch(loader, epoch)  # checks the order against plan(epoch)
        check_exactly_once(records, 23, loader.streaming.plan(epoch, 1, num_workers), "pad")
        orders.append([indices for indices, _ in records])
        iterator = loader._iterator  # DataLoader keeps one iterator (its workers) when persistent
        assert iterator is not None
        workers = workers or list(iterator._workers)
        assert list(iterator._workers) == workers, "persistent workers were restarted"
    assert orders[0] != orders[1] != orders[2] != orders[0]


def test_epoch_order_does_not_depend_on_worker_persistence(small_dataset: str) -> None:
    """G4/P5: epoch 2 of a persistent loader equals epoch 2 of a fresh one."""
    persistent = loader_for(small_dataset, batch_size=2, num_workers=2, persistent_workers=True)
    for epoch in range(3):
        got = run_epoch(persistent, epoch)
    fresh = loader_for(small_dataset, batch_size=2, num_workers=2)
    assert run_epoch(fresh, 2) == got


@pytest.mark.parametrize("num_workers", [2, 3])
def test_out_of_order_delivery_still_exactly_once(uneven_dataset: str, num_workers: int) -> None:
    """``in_order=False`` may interleave workers differently; each consumer's batches still
    come in plan order and every sample exactly once (G2)."""
    loader = loader_for(uneven_dataset, batch_size=8, num_workers=num_workers, in_order=False,
                        prefetch_factor=4)
    for epoch in range(2):
        records = run_epoch(loader, epoch, check_contents=False)
        check_exactly_once(records, 1001, loader.streaming.plan(epoch, 1, num_workers), "pad")


@pytest.mark.filterwarnings(PIN_WITHOUT_ACCELERATOR)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_pin_memory_on_cpu(small_dataset: str, num_workers: int) -> None:
    """``pin_memory=True`` goes through DataLoader's pin path (``Ragged.pin_memory`` included)
    and changes nothing about what is delivered (G2); on a CPU-only host torch warns."""
    loader = loader_for(small_dataset, batch_size=3, num_workers=num_workers, pin_memory=True)
    records = run_epoch(loader, 0)
    check_exactly_once(records, 23, loader.streaming.plan(0, 1, num_workers), "pad")


def test_ragged_and_bytes_fields_arrive_as_ragged(uneven_dataset: str) -> None:
    """Variable-length arrays and bytes cross the worker boundary as ``Ragged`` (one flat tensor
    plus offsets; target T1 in benchmarks/README.md); ``to_padded`` gives a dense view with a mask."""
    loader = loader_for(uneven_dataset, batch_size=5, num_workers=2, shuffle=False)
    batch = next(iter(loader))  # ids 0..4: token lengths 0, 1, 2, 3, 4
    tokens, blob = batch["tokens"], batch["blob"]
    assert isinstance(tokens, sk.Ragged) and isinstance(blob, sk.Ragged)
    assert tokens.lengths.tolist() == [0, 1, 2, 3, 4]
    assert tokens.values.tolist() == [1, 2, 3, 3, 4, 5, 4, 5, 6, 7]
    assert [blob[i] for i in range(5)] == [b"", b"\x01", b"\x02\x02", b"\x03\x03\x03", b""]
    padded, mask = tokens.to_padded(pad_value=-1)
    assert padded.shape == (5, 4) and mask.sum() == 10
    assert padded[2].tolist() == [2, 3, -1, -1]
    assert batch["pair"].dtype == torch.float32 and batch["pair"].shape == (5, 2)
    assert batch["text"] == [f"sample-{i}" for i in range(5)]


@pytest.mark.parametrize("context", [None, "spawn"])
def test_batches_the_loop_keeps_stay_intact(uneven_dataset: str, context: str | None,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """specs/batch-transport.md X3–X5 end to end: a loop that keeps every batch of an epoch (far
    more than the shared ring's slots) gets every one intact — later batches fall back to fresh
    buffers instead of overwriting held ones — and the ring is free again once they are dropped.
    Spawned workers cannot inherit the ring and use fresh buffers throughout, which the loader
    says once (a library may have switched the process to spawn unasked)."""
    loader = loader_for(uneven_dataset, batch_size=8, num_workers=2, shuffle=False,
                        multiprocessing_context=context)
    shard_loader._warned_methods.clear()
    with caplog.at_level(logging.WARNING, logger="shardkit"):
        batches = list(loader)
    ring = loader._ring
    warned = [r for r in caplog.records if "not fork" in r.getMessage()]
    assert len(warned) == (1 if context == "spawn" else 0)
    if context == "spawn":
        assert ring is None
        assert loader.stats()["fresh_buffers"] == 0  # counted only where a ring exists
    else:
        assert ring is not None and ring.busy() == 2 * ring.slots, "the held batches fill the ring"
        assert loader.stats()["fresh_buffers"] > 0  # the later batches fell back (X5), and say so
    for batch in batches:
        for row in range(8):
            check_delivered_sample(batch, row)
    check_exactly_once([to_record(b) for b in batches], 1001, loader.streaming.plan(0, 1, 2), "pad")
    del batches
    gc.collect()
    if ring is not None:
        assert ring.busy() == 0


def test_a_loop_that_drops_its_batches_uses_the_ring_for_every_batch(uneven_dataset: str) -> None:
    """X3/X4 in steady state: batches the loop lets go free their slots, so no batch of the
    epoch needs a fresh buffer (the transport fast path is actually taken, ragged fields,
    empty arrays, bytes and str lists included)."""
    loader = loader_for(uneven_dataset, batch_size=8, num_workers=2, shuffle=False)
    count = sum(1 for _ in loader)
    stats = loader.stats()
    assert count == stats["steps"] > 100
    assert stats["fresh_buffers"] == 0
    assert loader._ring is not None and loader._ring.busy() == 0


def test_a_loop_that_stops_mid_group_leaves_no_slot_behind(uneven_dataset: str) -> None:
    """X4/X8 with persistent workers (one ring for life): epochs the loop leaves after 5 steps,
    in the middle of a group of 4, with more groups in flight — the batches it never took give
    their slots back, so a later full epoch still needs no fresh buffer and ends with the ring
    free."""
    loader = loader_for(uneven_dataset, batch_size=8, num_workers=2, shuffle=False,
                        persistent_workers=True)
    assert loader.batches_per_transfer == 4
    for epoch in range(3):
        loader.set_epoch(epoch)
        taken = [batch["id"].tolist() for _, batch in zip(range(5), loader, strict=False)]
        assert len(taken) == 5
        gc.collect()
    loader.set_epoch(3)
    count = sum(1 for _ in loader)
    gc.collect()
    assert count == loader.stats()["steps"] > 100
    assert loader.stats()["fresh_buffers"] == 0
    assert loader._ring is not None and loader._ring.busy() == 0


def test_no_ring_when_the_mapping_cannot_be_made(uneven_dataset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """X5 when the shared mapping itself fails (e.g. ``vm.overcommit_memory=2`` refusing the
    virtual reservation): the loader carries on with fresh buffers and delivers every sample."""
    import shardkit.loader.shard_loader as shard_loader

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(shard_loader, "Ring", refuse)
    loader = loader_for(uneven_dataset, batch_size=8, num_workers=2, shuffle=False)
    records = run_epoch(loader, 0)
    assert loader._ring is None
    check_exactly_once(records, 1001, loader.streaming.plan(0, 1, 2), "pad")


def test_an_older_iterator_keeps_its_ring(uneven_dataset: str) -> None:
    """Two live iterators of one loader (fresh workers each, X3): the second makes a new ring
    the first one's workers never inherited. Workers read the control block when they start
    reading, so the first iterator's workers see the newer ring's name, do not find it, and fall
    back to fresh buffers (X5). Both iterators still deliver intact batches."""
    loader = loader_for(uneven_dataset, batch_size=8, num_workers=2, shuffle=False)
    first = iter(loader)  # not advanced yet: no batch of it exists in this process
    second = iter(loader)
    gc.collect()
    rest = list(first)
    assert len(rest) > 100
    for batch in rest + [next(second)]:
        for row in range(8):
            check_delivered_sample(batch, row)
