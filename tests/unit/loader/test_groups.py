"""Groups of batches per DataLoader item (specs/batch-transport.md X8) and what the training
process makes of them: group boundaries on multiples of the group size in each consumer's
sequence, unopened batches giving their ring slot back, and stall counting per item."""

from __future__ import annotations

import gc
import logging
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardkit.loader.collate import collate_samples
from shardkit.loader.loader_stats import LoaderStats
from shardkit.loader.transfer.arena import batch_arena
from shardkit.loader.transfer.packed import BatchGroup, PackedBatch, in_groups, pack_batch
from shardkit.loader.transfer.ring import Ring


@given(total=st.integers(0, 60), size=st.integers(1, 9), first=st.integers(0, 40))
def test_groups_start_on_multiples_of_the_size(total: int, size: int, first: int) -> None:
    """X8: batches ``first … first+total-1`` of a consumer come in order, every group ends on a
    multiple of ``size`` (the last group may end early), and none is longer than ``size`` — so a
    run resumed at batch ``first`` groups exactly like the uninterrupted run did from there."""
    groups = list(in_groups(iter(range(first, first + total)), size, first))
    assert all(isinstance(group, BatchGroup) and group.batches for group in groups)
    flat = [batch for group in groups for batch in group.batches]
    assert flat == list(range(first, first + total))
    for group in groups[:-1]:
        assert (group.batches[-1] + 1) % size == 0
    assert all(len(group.batches) <= size for group in groups)
    uninterrupted = [g.batches for g in in_groups(iter(range(first + total)), size, 0)]
    cut = [g for g in uninterrupted if g[-1] >= first]
    if cut:  # the resumed groups are the uninterrupted ones, the first one cut at ``first``
        assert [g.batches for g in groups] == [[b for b in cut[0] if b >= first], *cut[1:]]


def packed_in(ring: Ring) -> PackedBatch:
    samples = [{"id": i, "tokens": np.arange(i + 1, dtype=np.int32)} for i in range(4)]
    with batch_arena(1 << 10, ring, 0) as arena:
        batch = collate_samples(samples)
    return pack_batch(batch, arena)


def test_a_received_batch_dropped_unopened_frees_its_slot() -> None:
    """X4/X8: the rest of a group the loop never took (it stopped mid-group) holds no slot."""
    ring = Ring(num_workers=1, slots=3, slot_bytes=1 << 16)
    sent = [packed_in(ring) for _ in range(3)]
    assert ring.busy() == 3
    received = pickle.loads(pickle.dumps(BatchGroup(sent)))  # noqa: S301 - our own object
    del sent  # the worker's copies: the slots now belong to the training process
    gc.collect()
    assert ring.busy() == 3
    opened = received.batches[0].unpack()
    del received
    gc.collect()
    assert ring.busy() == 1, "the two unopened batches gave their slots back, the open one did not"
    assert opened["id"].tolist() == [0, 1, 2, 3]
    del opened
    gc.collect()
    assert ring.busy() == 0


def stall_warnings(caplog: pytest.LogCaptureFixture, waits: list[tuple[float, bool]]) -> int:
    stats = LoaderStats(stall_threshold=0.5, stall_steps=3)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader.loader_stats"):
        for wait, in_group in waits:
            stats.step(wait, 8, None, in_group)
    return sum("data stall" in record.message for record in caplog.records)


@pytest.mark.parametrize(("waits", "warnings"), [
    ([(1.0, False)] * 3, 1),  # three stalls in a row: one warning
    ([(1.0, False)] * 10, 1),  # and only one
    ([(1.0, False), (1.0, False), (0.0, False), (1.0, False)], 0),  # a fast step breaks the run
    # groups of 3: every item waits, the batches behind it do not; still a stall per item
    ([(1.0, False), (0.0, True), (0.0, True)] * 3, 1),
    ([(1.0, False), (0.0, True), (0.0, False), (1.0, False), (1.0, False)], 0),
])
def test_stall_warning_counts_items_not_the_batches_inside_them(
        caplog: pytest.LogCaptureFixture, waits: list[tuple[float, bool]], warnings: int) -> None:
    """G10 in docs/guarantees.md: one warning after ``stall_steps`` slow steps in a row; batches that arrived
    with their group neither count as stalls nor break a run of them."""
    assert stall_warnings(caplog, waits) == warnings
