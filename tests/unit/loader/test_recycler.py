"""Reused batch buffers (loader/transfer/recycler.py, X6 in specs/batch-transport.md): a buffer
goes out again only when nothing of an earlier batch can still see it — not the tensor, a slice
of it, its ``.numpy()``, a ``Ragged`` or a batch dict holding it — and then it does go out again."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.loader.ragged import Ragged
from shardkit.loader.transfer import recycler as recycler_module
from shardkit.loader.transfer.recycler import RECYCLE_BYTES, Recycler

DTYPES = (torch.uint8, torch.int32, torch.float64)


def _bytes(holder: Any) -> np.ndarray:
    """The bytes a holder sees, as uint8."""
    if isinstance(holder, dict):
        holder = holder["x"]
    if isinstance(holder, Ragged):
        holder = holder.values
    if isinstance(holder, torch.Tensor):
        holder = holder.numpy()
    return holder.reshape(-1).view(np.uint8)


def _hold(tensor: torch.Tensor, how: str) -> Any:
    """What the test keeps of a fresh tensor (the tensor itself is dropped by the caller)."""
    if how == "slice":
        return tensor[1:]
    if how == "numpy":
        return tensor.numpy()[2:]
    if how == "ragged":
        return Ragged(tensor, torch.tensor([0, len(tensor)]))
    if how == "dict":
        return {"x": tensor}
    return tensor


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["alloc", "alloc", "drop", "drop_all"]),
                              st.integers(0, 20), st.sampled_from(DTYPES),
                              st.sampled_from(["tensor", "slice", "numpy", "ragged", "dict"])),
                    max_size=30))
def test_what_a_batch_still_holds_is_never_handed_out_again(ops):
    recycler = Recycler(keep=3)
    live: list[tuple[Any, int]] = []  # (what the test holds, the byte its memory was filled with)
    fill = 0
    for op, pick, dtype, how in ops:
        if op == "alloc":
            fill = fill % 255 + 1
            count = (RECYCLE_BYTES + pick * 4096) // dtype.itemsize
            tensor = recycler.empty((count,), dtype)
            _bytes(tensor)[:] = fill
            live.append((_hold(tensor, how), fill))
            del tensor
        elif op == "drop" and live:
            live.pop(pick % len(live))
        elif op == "drop_all":
            live.clear()
        for holder, value in live:  # nothing handed out later has written over what is held
            seen = _bytes(holder)
            assert seen[0] == value and seen[-1] == value and (seen == value).all()
        assert len(recycler._buffers) <= recycler.keep


def test_a_buffer_comes_back_once_its_batch_is_gone():
    recycler = Recycler()
    first = recycler.empty((RECYCLE_BYTES,), torch.uint8)
    pointer = first.data_ptr()
    del first
    again = recycler.empty((RECYCLE_BYTES // 8,), torch.int64)
    assert again.data_ptr() == pointer and recycler.reused == 1


def test_a_view_keeps_its_buffer_busy():
    recycler = Recycler()
    first = recycler.empty((RECYCLE_BYTES,), torch.uint8)
    pointer = first.data_ptr()
    view = first[100:200]
    del first
    second = recycler.empty((RECYCLE_BYTES,), torch.uint8)
    assert second.data_ptr() != pointer and recycler.reused == 0
    del view, second
    assert recycler.empty((RECYCLE_BYTES,), torch.uint8).data_ptr() == pointer


def test_small_huge_and_all_busy_tensors_fall_back_to_torch_empty(monkeypatch):
    recycler = Recycler(keep=2)
    small = recycler.empty((16,), torch.int64)
    assert small.shape == (16,) and not recycler._buffers
    monkeypatch.setattr(recycler_module, "RECYCLE_MAX", 2 * RECYCLE_BYTES)
    huge = recycler.empty((3 * RECYCLE_BYTES,), torch.uint8)  # would be held for an epoch
    assert huge.numel() == 3 * RECYCLE_BYTES and not recycler._buffers
    held = [recycler.empty((RECYCLE_BYTES,), torch.uint8) for _ in range(3)]
    assert len(recycler._buffers) == 2
    owned = set(recycler.addresses())
    assert held[0].data_ptr() in owned and held[1].data_ptr() in owned
    assert held[2].data_ptr() not in owned


def test_a_larger_batch_replaces_a_free_buffer_that_is_too_small():
    recycler = Recycler(keep=1)
    first = recycler.empty((RECYCLE_BYTES,), torch.uint8)
    del first
    large = recycler.empty((4 * RECYCLE_BYTES,), torch.uint8)
    assert len(recycler._buffers) == 1 and len(recycler._buffers[0]) >= 4 * RECYCLE_BYTES
    assert large.data_ptr() == recycler.addresses()[0]
