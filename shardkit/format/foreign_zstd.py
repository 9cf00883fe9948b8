"""Whole zstd streams written by other tools (MDS ``.zstd`` shards, LitData chunks) → bytes.

Unlike shardkit's own blocks, these frames may omit the content size, and a stream may hold
several frames back to back. ``limit`` bounds the output so a hostile file cannot inflate
without end. Pure: no I/O.
"""

from __future__ import annotations

import zstandard

from shardkit.errors import FormatError

_FEED_BYTES = 4096


def decompress_zstd_stream(data: bytes, limit: int, origin: str) -> bytes:
    """The concatenated content of every zstd frame in ``data``; at most ``limit`` bytes.

    Raises ``FormatError`` naming ``origin`` when the bytes are not zstd, are truncated, or
    inflate past ``limit``.
    """
    out = bytearray()
    rest = data
    try:
        while rest:
            decoder = zstandard.ZstdDecompressor().decompressobj()
            # Fed in small pieces so a bomb is stopped soon after it passes the limit.
            for start in range(0, len(rest), _FEED_BYTES):
                out += decoder.decompress(rest[start : start + _FEED_BYTES])
                if len(out) > limit:
                    raise FormatError(f"{origin}: zstd data inflates past {limit} bytes")
                if decoder.eof:
                    break
            if not decoder.eof:
                raise FormatError(f"{origin}: zstd stream is truncated")
            rest = decoder.unused_data
    except zstandard.ZstdError as exc:
        raise FormatError(f"{origin}: not a valid zstd stream: {exc}") from None
    return bytes(out)
