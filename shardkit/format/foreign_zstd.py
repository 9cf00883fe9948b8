"""Whole compressed streams written by other tools (MDS ``.zstd``/``.gz``/``.bz2`` shards,
LitData chunks) → bytes, never more than a limit.

Unlike shardkit's own blocks, these frames may omit the content size, and a stream may hold
several frames (gzip/bzip2 members) back to back. ``limit`` bounds the output, and no step
produces much more than what is left of it, so a hostile file cannot make the reader hold
more than about ``limit`` bytes however far it would inflate. Pure: no I/O.
"""

from __future__ import annotations

import bz2
import zlib

import zstandard

from shardkit.errors import FormatError

# The most a zstd decoder can produce per input byte: an RLE block, 3 header bytes + 1 byte,
# stands for up to 128 KiB (zstd's Block_Maximum_Size). Feeding at most (room left) / this
# many bytes at a time keeps each step's output within the room left (plus one small feed).
_ZSTD_MAX_RATIO = (128 << 10) // 4
_MIN_FEED = 64
_MAX_FEED = 1 << 20
_STEP = 1 << 20  # gzip/bzip2 give their output in pieces of at most this many bytes
_INFLATE_ERRORS = (zstandard.ZstdError, zlib.error, OSError, EOFError, ValueError)


def inflate_stream(algo: str, data: bytes, limit: int, origin: str, why: str = "") -> bytes:
    """The content of a ``zstd``, ``gz`` or ``bz2`` stream (every frame or member); at most
    ``limit`` bytes. ``FormatError`` naming ``origin`` when the bytes are not of that kind,
    are truncated, or inflate past ``limit`` (the message then ends with ``why``: where the
    limit comes from)."""
    where = (origin, f" ({why})" if why else "")
    try:
        if algo == "zstd":
            return _zstd(data, limit, where)
        if algo == "gz":
            return _gzip(data, limit, where)
        if algo == "bz2":
            return _bzip2(data, limit, where)
    except FormatError:
        raise
    except _INFLATE_ERRORS as exc:
        raise FormatError(f"{origin}: not a valid {algo} stream: {exc}") from None
    raise FormatError(f"{origin}: unknown compression {algo!r}")


def decompress_zstd_stream(data: bytes, limit: int, origin: str) -> bytes:
    """``inflate_stream("zstd", …)``: the concatenated content of every zstd frame in ``data``."""
    return inflate_stream("zstd", data, limit, origin)


def _too_big(algo: str, limit: int, where: tuple[str, str]) -> FormatError:
    return FormatError(f"{where[0]}: {algo} data inflates past {limit} bytes{where[1]}")


def _zstd(data: bytes, limit: int, where: tuple[str, str]) -> bytes:
    out = bytearray()
    rest = memoryview(data)
    while len(rest):
        decoder = zstandard.ZstdDecompressor().decompressobj()
        at = 0
        while at < len(rest) and not decoder.eof:
            feed = min(_MAX_FEED, max(_MIN_FEED, (limit - len(out)) // _ZSTD_MAX_RATIO))
            out += decoder.decompress(rest[at : at + feed].tobytes())
            at += feed
            if len(out) > limit:
                raise _too_big("zstd", limit, where)
        if not decoder.eof:
            raise FormatError(f"{where[0]}: zstd stream is truncated")
        rest = memoryview(decoder.unused_data + rest[at:].tobytes()) if decoder.unused_data else rest[at:]
    return bytes(out)


def _gzip(data: bytes, limit: int, where: tuple[str, str]) -> bytes:
    out = bytearray()
    rest = data.lstrip(b"\0")
    while rest:  # members back to back; zero padding after the last is allowed
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending = rest
        while not decoder.eof:
            if not pending:
                raise FormatError(f"{where[0]}: gz stream is truncated")
            out += decoder.decompress(pending, min(_STEP, limit + 1 - len(out)))
            pending = decoder.unconsumed_tail
            if len(out) > limit:
                raise _too_big("gz", limit, where)
        rest = decoder.unused_data.lstrip(b"\0")
    return bytes(out)


def _bzip2(data: bytes, limit: int, where: tuple[str, str]) -> bytes:
    out = bytearray()
    rest = data
    while rest:
        decoder = bz2.BZ2Decompressor()
        out += decoder.decompress(rest, min(_STEP, limit + 1 - len(out)))
        while not decoder.eof and not decoder.needs_input and len(out) <= limit:
            out += decoder.decompress(b"", min(_STEP, limit + 1 - len(out)))
        if len(out) > limit:
            raise _too_big("bz2", limit, where)
        if not decoder.eof:
            raise FormatError(f"{where[0]}: bz2 stream is truncated")
        rest = decoder.unused_data
    return bytes(out)
