"""``Ragged`` iteration: the batch-wide fast path agrees with indexing, item by item."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.loader.ragged import Ragged

payloads = st.lists(st.binary(max_size=64), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(payloads)
def test_bytes_iterate_as_owned_bytes_equal_to_indexing(items: list[bytes]) -> None:
    ragged = Ragged.from_bytes(items)
    listed = list(ragged)
    assert listed == items == [ragged[i] for i in range(len(ragged))] == ragged.tolist()
    assert all(type(item) is bytes for item in listed)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=12), st.integers(1, 3))
def test_arrays_iterate_as_views_equal_to_indexing(lengths: list[int], width: int) -> None:
    arrays = [np.arange(n * width, dtype=np.int32).reshape(n, width) + n for n in lengths]
    ragged = Ragged.from_arrays(arrays)
    for position, item in enumerate(ragged):
        np.testing.assert_array_equal(item.numpy(), arrays[position])
        np.testing.assert_array_equal(ragged[position].numpy(), arrays[position])
        assert item.data_ptr() == ragged[position].data_ptr() or len(item) == 0


def test_bytes_from_iteration_outlive_the_batch() -> None:
    ragged = Ragged.from_bytes([b"abc", b"", b"de"])
    items = list(ragged)
    ragged.values.fill_(0)
    assert items == [b"abc", b"", b"de"]
