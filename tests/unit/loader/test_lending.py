"""X2: the one release rule (loader/transfer/lending.py). Memory lent as one array comes back
exactly when nothing made from that array is left — through any chain of numpy views, dtype
views, reshapes, torch tensors, their ``.numpy()``, slices of those and ``Ragged`` — and not a
moment before. Ring slots (test_ring.py) and recycled buffers (test_recycler.py) use this rule."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.loader.ragged import Ragged
from shardkit.loader.transfer.lending import lend

STEPS = ("slice", "view_int32", "reshape", "from_numpy", "to_numpy", "tensor_slice", "ragged", "in_dict")


def _derive(value: Any, step: str) -> Any:
    if isinstance(value, dict):
        value = value["x"]
    if isinstance(value, Ragged):
        value = value.values
    if isinstance(value, torch.Tensor):
        if step == "to_numpy":
            return value.numpy()
        if step == "tensor_slice":
            return value[1:]
        if step == "ragged":
            return Ragged(value, torch.tensor([0, len(value)]))
        if step == "in_dict":
            return {"x": value}
        value = value.numpy()
    if step == "slice":
        return value[1:]
    if step == "view_int32":
        return value.view(np.int32) if value.nbytes % 4 == 0 and value.ndim == 1 else value
    if step == "reshape":
        return value.reshape(1, -1)[0]
    return torch.from_numpy(value)


@settings(max_examples=150, deadline=None)
@given(chain=st.lists(st.sampled_from(STEPS), max_size=8), keep=st.data(), kind=st.sampled_from(["mmap", "array"]))
def test_memory_comes_back_exactly_when_the_last_thing_made_from_it_is_gone(chain, keep, kind):
    """Both kinds of memory lent: an mmap (ring slots) and a memoryview of an ndarray (recycler)."""
    memory = mmap.mmap(-1, 4096) if kind == "mmap" else memoryview(np.empty(4096, dtype=np.uint8))
    released: list[int] = []
    lent = lend(memory, 512, 1024, released.append, 7)
    values = [lent]
    for step in chain:
        values.append(_derive(values[-1], step))
    del lent
    kept = keep.draw(st.integers(0, len(values) - 1), label="the one thing kept")
    held = values[kept]
    values.clear()
    assert released == [], "released while something made from the lent array lives"
    del held  # no gc.collect(): nothing here makes a cycle, so the release is immediate (and a
    assert released == [7]  # full collection per example took minutes in a large test session)
