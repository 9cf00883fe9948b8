"""``unpack_with_views`` (shardkit/format/sample_views.py): large samples decoded with their bin
values and arrays as views of the block, or handed back (None) to ``unpackb``.

Property: for every sample the codec can write, the view decoder either declines or returns
exactly what ``decode_sample`` returns (bin values as memoryviews of equal bytes), and it never
raises on truncated or corrupted bytes. ``decode_block_samples(views=True)`` equals the copying
path sample by sample, and refuses the same corrupt blocks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import FormatError
from shardkit.format import SampleEncoder, decode_block_samples, decode_sample
from shardkit.format.sample_codec import _ext_hook
from shardkit.format.sample_views import unpack_with_views
from tests.helpers.samples import assert_value_equal, samples

encoder = SampleEncoder()


def viewed(data: bytes) -> dict | None:
    return unpack_with_views(memoryview(data), _ext_hook)


def as_bytes(value: object) -> object:
    return bytes(value) if isinstance(value, memoryview) else value


@settings(max_examples=300)
@given(sample=samples)
def test_views_decode_what_unpackb_decodes_or_decline(sample: dict) -> None:
    data = encoder.encode(sample)
    got, want = viewed(data), decode_sample(data)
    if got is None:  # str values, containers: left to unpackb
        return
    assert list(got) == list(want)
    for key, value in want.items():
        assert_value_equal(as_bytes(got[key]), value, f"$.{key}")


@given(big=st.binary(min_size=0, max_size=70_000),
       number=st.one_of(st.integers(-40, 300), st.integers(-(2**63), 2**64 - 1)),
       real=st.floats(allow_nan=False, width=32), flag=st.sampled_from([None, True, False]))
def test_the_sample_kinds_large_records_are_made_of_are_viewed(big: bytes, number: int, real: float,
                                                               flag: bool | None) -> None:
    """Every bin width (8/16/32-bit lengths), every int width, floats, bool, nil and arrays are
    decoded without declining; bin values are views of the encoded bytes, not copies."""
    sample = {"jpg": big, "id": number, "x": real, "flag": flag,
              "arr": np.arange(len(big) % 97, dtype=np.int16), "one": np.float32(real)}
    data = encoder.encode(sample)
    got = viewed(data)
    assert got is not None
    assert isinstance(got["jpg"], memoryview) and bytes(got["jpg"]) == big
    assert got["id"] == number and got["flag"] is flag
    assert got["x"] == real
    assert got["arr"].tolist() == sample["arr"].tolist() and not got["arr"].flags.writeable
    assert got["one"] == sample["one"] and type(got["one"]) is np.float32


@given(sample=samples, data=st.data())
def test_damaged_bytes_are_declined_or_decoded_exactly_like_unpackb(sample: dict, data: st.DataObject) -> None:
    """Truncated or bit-flipped input: None (unpackb then decodes or reports it), or exactly
    what unpackb decodes; never an exception, never a wrong-length view."""
    encoded = bytearray(encoder.encode(sample))
    if data.draw(st.booleans()) and encoded:
        encoded = encoded[: data.draw(st.integers(0, len(encoded) - 1))]
    elif encoded:
        at = data.draw(st.integers(0, len(encoded) - 1))
        encoded[at] ^= data.draw(st.integers(1, 255))
    damaged = bytes(encoded)
    got = viewed(damaged)  # must not raise: anything malformed is left to unpackb
    if got is None:
        return
    want = decode_sample(damaged)  # what it accepts, unpackb decodes to the same values
    assert list(got) == list(want)
    for key, value in want.items():
        assert_value_equal(as_bytes(got[key]), value, f"$.{key}")


def test_block_decoding_with_views_equals_the_copying_path() -> None:
    rng = np.random.default_rng(5)
    records = [{"id": i, "jpg": rng.bytes(int(rng.integers(20_000, 40_000))), "label": i % 7,
                "emb": rng.random(8).astype(np.float32)} for i in range(9)]
    records[4]["caption"] = "a str value: this sample goes through unpackb"
    encoded = [encoder.encode(r) for r in records]
    block = b"".join(encoded)
    offsets = np.cumsum([0, *map(len, encoded)])
    copied = decode_block_samples(block, len(records), offsets)
    views = decode_block_samples(memoryview(block), len(records), offsets, views=True)
    assert isinstance(views[0]["jpg"], memoryview) and isinstance(views[4]["jpg"], bytes)
    for got, want in zip(views, copied, strict=True):
        assert list(got) == list(want)
        for key in want:
            assert_value_equal(as_bytes(got[key]), want[key], key)
    broken = bytearray(block)
    broken[offsets[3] + 1] = 0xC1  # a never-used msgpack type byte where a key should be
    for views_flag in (False, True):
        with pytest.raises((FormatError, ValueError)):
            decode_block_samples(bytes(broken), len(records), offsets, views=views_flag)
