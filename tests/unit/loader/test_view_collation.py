"""The default collation of samples decoded with views of their block (format/sample_views.py).

The property that matters: for any batch of samples the codec can write, collating the samples
decoded with ``views=True`` (large samples' bin values as memoryviews of the block, arrays as
views of it) gives exactly the batch that collating fully decoded samples gives — same tensors,
dtypes, shapes, Ragged offsets, lists — and no view of a block is left in what it returns."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardkit.format import SampleEncoder, decode_block_samples
from shardkit.loader.collate import collate_samples
from shardkit.loader.ragged import Ragged
from tests.helpers.samples import assert_value_equal, values

encoder = SampleEncoder()
COLUMN_DTYPES = ("<i4", "<i8", "<f4", "<f2", "|u1", "|b1", ">i4", "<f8")


@st.composite
def batches(draw: st.DrawFn) -> list[dict[str, Any]]:
    """1-8 samples sharing their keys: a 1-D array column of one dtype (ragged or not, the fast
    path), a column of any codec values, and sometimes a field missing from some samples."""
    size = draw(st.integers(1, 8))
    dtype = np.dtype(draw(st.sampled_from(COLUMN_DTYPES)))
    same_length = draw(st.booleans())
    length = draw(st.integers(0, 6))
    out = []
    for i in range(size):
        shape = (length,) if same_length else (draw(st.integers(0, 6)),)
        sample = {"id": i, "tok": draw(hnp.arrays(dtype, shape)), "any": draw(values)}
        if draw(st.integers(0, 4)) == 0:
            sample["maybe"] = draw(values)
        out.append(sample)
    return out


def decoded(samples: list[dict[str, Any]], views: bool, big: bool = False) -> list[dict[str, Any]]:
    encoded = [encoder.encode(s) for s in samples]
    offsets = np.cumsum([0, *map(len, encoded)])
    block = b"".join(encoded)
    if big:  # samples padded past 16 KB: the per-sample (view) path
        return decode_block_samples(memoryview(block), len(samples), offsets, views=views)
    return decode_block_samples(block, len(samples), offsets, views=views)


def assert_no_views(value: Any) -> None:
    """Nothing returned views a block: no memoryview, no array whose base is one."""
    if isinstance(value, dict):
        for item in value.values():
            assert_no_views(item)
    elif isinstance(value, list):
        for item in value:
            assert_no_views(item)
    else:
        assert not isinstance(value, memoryview)
        assert not (isinstance(value, np.ndarray) and isinstance(value.base, memoryview))


def assert_batch_equal(got: Any, want: Any, path: str = "$") -> None:
    if isinstance(want, Ragged):
        assert isinstance(got, Ragged) and got.kind == want.kind, path
        assert_batch_equal(got.values, want.values, f"{path}.values")
        assert_batch_equal(got.offsets, want.offsets, f"{path}.offsets")
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape, path
        assert got.numpy().tobytes() == want.numpy().tobytes(), path
    elif isinstance(want, dict) and all(isinstance(k, str) for k in want) and path == "$":
        assert list(got) == list(want), path
        for key in want:
            assert_batch_equal(got[key], want[key], f"{path}.{key}")
    else:
        assert_value_equal(got, want, path)


@settings(max_examples=60, deadline=None)
@given(samples=batches(), fill=st.integers(0, 255))
def test_collating_viewed_large_samples_equals_full_decoding(samples: list[dict[str, Any]],
                                                                  fill: int) -> None:
    for sample in samples:
        sample["jpg"] = bytes([fill]) * 16_500
    viewed = decoded(samples, views=True, big=True)
    # samples with str or container values are declined by the walker and decoded by unpackb
    assert all(type(s["jpg"]) is memoryview for s in viewed if not any(
        isinstance(v, (str, list, dict)) for v in s.values()))
    got = collate_samples(viewed)
    assert_batch_equal(got, collate_samples(decoded(samples, views=False, big=True)))
    assert_no_views(got)


@settings(max_examples=100, deadline=None)
@given(small=batches(), large=batches(), fill=st.integers(0, 255), order=st.randoms())
def test_a_batch_mixing_small_and_large_sample_blocks_collates_the_same(
        small: list[dict[str, Any]], large: list[dict[str, Any]], fill: int, order: Any) -> None:
    """A batch spanning a block of small samples (bins as bytes) and a block of large ones
    (bins and arrays as views) — a shard boundary or a shuffle window does that."""
    for sample in large:
        sample["jpg"] = bytes([fill]) * 16_500
    for sample in small:
        sample["jpg"] = b"small"
    mixed_viewed = decoded(small, views=True) + decoded(large, views=True, big=True)
    mixed_full = decoded(small, views=False) + decoded(large, views=False, big=True)
    permutation = list(range(len(mixed_full)))
    order.shuffle(permutation)
    got = collate_samples([mixed_viewed[i] for i in permutation])
    assert_batch_equal(got, collate_samples([mixed_full[i] for i in permutation]))
    assert_no_views(got)
