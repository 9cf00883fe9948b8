"""Whole zstd streams from other tools: several frames, frames without a content size,
truncation and bombs (``shardkit.format.foreign_zstd``)."""

from __future__ import annotations

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import FormatError
from shardkit.format.foreign_zstd import decompress_zstd_stream


@settings(max_examples=50, deadline=None)
@given(parts=st.lists(st.binary(max_size=20000), min_size=1, max_size=4), sized=st.booleans())
def test_concatenated_frames_inflate_to_their_concatenation(parts, sized):
    compressor = zstandard.ZstdCompressor(write_content_size=sized)
    stream = b"".join(compressor.compress(part) for part in parts)
    want = b"".join(parts)
    assert decompress_zstd_stream(stream, len(want), "x.zstd") == want


def test_truncated_stream_is_named():
    stream = zstandard.ZstdCompressor().compress(bytes(range(256)) * 100)
    with pytest.raises(FormatError, match=r"x\.zstd: (zstd stream is truncated|not a valid)"):
        decompress_zstd_stream(stream[:-5], 1 << 20, "x.zstd")


def test_a_bomb_stops_at_the_limit():
    stream = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    with pytest.raises(FormatError, match="inflates past 1000 bytes"):
        decompress_zstd_stream(stream, 1000, "x.zstd")
