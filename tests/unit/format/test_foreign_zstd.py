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


def test_frames_larger_than_one_feed_are_all_read():
    """Every frame of a stream whose frames are each far larger than one feed (before, the
    bytes after the first frame's last feed were dropped and the stream called truncated)."""
    rng = __import__("numpy").random.default_rng(0)
    parts = [rng.bytes(300_000), rng.bytes(200_000)]
    stream = b"".join(zstandard.ZstdCompressor().compress(p) for p in parts)
    assert decompress_zstd_stream(stream, 500_000, "x.zstd") == b"".join(parts)


@pytest.mark.parametrize("algo", ["zstd", "gz", "bz2"])
def test_every_codec_stops_near_its_limit_however_far_the_bomb_goes(algo):
    """PI11: the output never grows much past the limit: a 256 MiB bomb with a 1000-byte
    limit is refused having made at most ~2 MiB (one feed's worth)."""
    import bz2
    import gzip
    import tracemalloc

    from shardkit.format.foreign_zstd import inflate_stream

    zeros = bytes(256 << 20)
    bomb = {"zstd": zstandard.ZstdCompressor(level=1).compress, "gz": lambda d: gzip.compress(d, 1),
            "bz2": lambda d: bz2.compress(d, 1)}[algo](zeros)  # fmt: skip
    del zeros
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match=f"^x: {algo} data inflates past 1000 bytes \\(the index\\)$"):
            inflate_stream(algo, bomb, 1000, "x", "the index")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes held for a 1000-byte limit"


@pytest.mark.parametrize("algo", ["gz", "bz2"])
def test_gzip_and_bzip2_members_back_to_back_and_truncation(algo):
    import bz2
    import gzip

    from shardkit.format.foreign_zstd import inflate_stream

    compress = gzip.compress if algo == "gz" else bz2.compress
    stream = compress(b"a" * 5000) + compress(b"b" * 7000)
    assert inflate_stream(algo, stream, 12000, "x") == b"a" * 5000 + b"b" * 7000
    with pytest.raises(FormatError, match=f"x: {algo} stream is truncated|not a valid {algo}"):
        inflate_stream(algo, stream[:-9], 12000, "x")
