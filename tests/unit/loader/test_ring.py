"""The shared batch ring (shardkit/loader/transfer/ring.py; specs/batch-transport.md X3–X5).

X3: only the worker takes a slot (FREE → BUSY), only the trainer frees it (BUSY → FREE).
X4: a slot is freed only when nothing in the trainer views it any more; a batch the loop holds is
never overwritten, however many batches follow.
X5: no free slot (or a batch too big for one) means a fresh buffer, never a wait.
"""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.loader.collate import collate_samples
from shardkit.loader.transfer.arena import batch_arena
from shardkit.loader.transfer.packed import PackedBatch, pack_batch
from shardkit.loader.transfer.ring import Ring, SlotRef, find


def make_batch(seed: int, arena_ring: Ring | None, worker: int = 0) -> tuple[PackedBatch, dict[str, list]]:
    """A collated batch with a ragged int32 field, a bytes field and a fixed-shape float field,
    written into a ring slot (or a fresh buffer) the way a worker does; and what it must hold."""
    rng = np.random.default_rng(seed)
    samples = [
        {
            "id": seed * 100 + i,
            "tokens": rng.integers(0, 1 << 30, size=int(rng.integers(0, 50)), dtype=np.int32),
            "blob": rng.bytes(int(rng.integers(0, 40))),
            "pair": rng.random(2).astype(np.float32),
            "text": f"s{seed}-{i}",
        }
        for i in range(int(rng.integers(1, 9)))
    ]
    expected = {
        "id": [s["id"] for s in samples],
        "tokens": [s["tokens"].tolist() for s in samples],
        "blob": [s["blob"] for s in samples],
        "pair": [s["pair"].tolist() for s in samples],
    }
    with batch_arena(1 << 10, arena_ring, worker) as arena:
        batch = collate_samples(samples)
    return pack_batch(batch, arena), expected


def cross(packed: PackedBatch) -> PackedBatch:
    """What the DataLoader result queue does to a batch (pickle out, unpickle in)."""
    return pickle.loads(pickle.dumps(packed))  # noqa: S301 - our own object, in-process


def check(batch: dict, expected: dict[str, list]) -> None:
    assert batch["id"].tolist() == expected["id"]
    assert [item.tolist() for item in batch["tokens"]] == expected["tokens"]
    assert [batch["blob"][i] for i in range(len(batch["blob"]))] == expected["blob"]
    assert batch["pair"].tolist() == expected["pair"]


def test_a_ring_slot_crosses_as_a_name_not_bytes() -> None:
    ring = Ring(num_workers=2, slots=3, slot_bytes=1 << 16)
    packed, expected = make_batch(1, ring, worker=1)
    assert isinstance(packed.buffer, SlotRef) and packed.buffer.worker == 1
    assert len(pickle.dumps(packed)) < 2048  # the message holds the layout, not the payload
    assert ring.busy() == 1
    batch = cross(packed).unpack()
    check(batch, expected)
    del batch, packed
    gc.collect()
    assert ring.busy() == 0, "X4: the slot is freed once nothing views it"


def test_views_keep_the_slot_busy_until_the_last_one_dies() -> None:
    """X4 with the views a training loop keeps: a Ragged item, a torch slice, a numpy view."""
    ring = Ring(num_workers=1, slots=2, slot_bytes=1 << 16)
    packed, expected = make_batch(2, ring)
    batch = cross(packed).unpack()
    del packed
    keep = [batch["pair"][1:], batch["tokens"].values.numpy()[:3], batch["id"]]
    del batch
    gc.collect()
    assert ring.busy() == 1
    for index in range(len(keep)):
        keep[index] = None
        gc.collect()
        assert ring.busy() == (1 if index < len(keep) - 1 else 0)


def test_no_free_slot_falls_back_to_a_fresh_buffer() -> None:
    """X5: with every slot held by the trainer, the next batch does not wait and is intact."""
    ring = Ring(num_workers=1, slots=2, slot_bytes=1 << 16)
    held = [cross(make_batch(seed, ring)[0]).unpack() for seed in range(2)]
    assert ring.busy() == 2
    packed, expected = make_batch(9, ring)
    assert not isinstance(packed.buffer, SlotRef)
    check(cross(packed).unpack(), expected)
    del held
    gc.collect()
    assert ring.busy() == 0


def test_a_batch_bigger_than_a_slot_is_copied_and_the_slot_given_back() -> None:
    ring = Ring(num_workers=1, slots=1, slot_bytes=256)
    packed, expected = make_batch(3, ring)
    assert not isinstance(packed.buffer, SlotRef)
    assert ring.busy() == 0, "X5: the worker gives back a slot it could not use"
    check(cross(packed).unpack(), expected)


def test_only_the_process_holding_the_ring_can_resolve_it() -> None:
    ring = Ring(num_workers=1, slots=1, slot_bytes=1 << 12)
    packed, _ = make_batch(4, ring)
    assert isinstance(packed.buffer, SlotRef)
    stranger = PackedBatch(SlotRef((0, 999_999), 0, 0, 8), packed.tensors, packed.ragged, packed.extras)
    assert find((0, 999_999)) is None
    with pytest.raises(RuntimeError, match="does not have"):
        stranger.unpack()


@settings(max_examples=40, deadline=None)
@given(
    slots=st.integers(1, 4),
    actions=st.lists(st.tuples(st.booleans(), st.integers(0, 7)), min_size=1, max_size=30),
)
def test_held_batches_are_never_overwritten(slots: int, actions: list[tuple[bool, int]]) -> None:
    """X3/X4/X5 as a property: any interleaving of new batches, kept batches and dropped batches
    leaves every kept batch equal to what was written, and frees every slot at the end."""
    ring = Ring(num_workers=1, slots=slots, slot_bytes=1 << 14)
    kept: list[tuple[dict, dict[str, list], bool]] = []
    for seed, (keep, drop_index) in enumerate(actions):
        packed, expected = make_batch(seed, ring)
        in_ring = isinstance(packed.buffer, SlotRef)
        assert in_ring == (sum(k[2] for k in kept) < slots), "a free slot must be used (X5)"
        batch = cross(packed).unpack()
        del packed
        if keep:
            kept.append((batch, expected, in_ring))
        if kept and drop_index % 3 == 0:
            kept.pop(drop_index % len(kept))
        del batch  # no gc.collect(): plain reference counting must free slots (no cycles)
        assert ring.busy() == sum(k[2] for k in kept)
        check_all(kept)
    kept.clear()
    assert ring.busy() == 0


def check_all(kept: list[tuple[dict, dict[str, list], bool]]) -> None:
    for held, held_expected, _ in kept:
        check(held, held_expected)


@pytest.mark.parametrize(("worker", "slot", "nbytes"), [(1, 0, 8), (0, 2, 8), (0, 0, 1 << 13), (-1, 0, 8)])
def test_a_slot_outside_the_ring_is_refused(worker: int, slot: int, nbytes: int) -> None:
    ring = Ring(num_workers=1, slots=2, slot_bytes=1 << 12)
    with pytest.raises(RuntimeError, match="outside ring"):
        ring.receive(SlotRef(ring.key, worker, slot, nbytes))
    assert ring.busy() == 0
