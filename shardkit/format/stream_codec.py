"""Decompressing a zstd *stream* (``pack`` inputs such as ``rows.jsonl.zst``), not shard blocks.

Kept here because zstandard is imported only under ``shardkit.format``; the caller opens the
file. Every frame of the stream is read, in order, and a stream that ends inside a frame is an
error (``EOFError``), never a silently shorter input. Memory stays bounded: input is fed in
small slices, so one call inflates at most ``_SLICE`` times zstd's maximum ratio.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

import zstandard

#: What reading a corrupt zstd stream raises (a truncated one raises ``EOFError``).
ZSTD_STREAM_ERRORS: tuple[type[Exception], ...] = (zstandard.ZstdError,)

_SLICE = 2048  # compressed bytes per decompress call: ≤ ~64 MiB out even for a hostile frame
_READ = 1 << 16


class _ZstdFrames(io.RawIOBase):
    """The decompressed bytes of consecutive zstd frames from ``raw``."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._frame: Any = None  # the decompressobj of the frame in progress
        self._input = b""
        self._output = memoryview(b"")  # slices of a view cost O(1), whatever its size
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._output and not self._done:
            self._step()
        count = min(len(buffer), len(self._output))
        buffer[:count] = self._output[:count]
        self._output = self._output[count:]
        return count

    def _step(self) -> None:
        if not self._input:
            self._input = self._raw.read(_READ)
            if not self._input:
                if self._frame is not None:
                    raise EOFError("truncated zstd stream: it ends inside a frame")
                self._done = True
                return
        piece, self._input = self._input[:_SLICE], self._input[_SLICE:]
        if self._frame is None:
            self._frame = self._dctx.decompressobj()
        self._output = memoryview(self._frame.decompress(piece))  # called only once drained
        if self._frame.eof:  # the next frame starts with what this one did not use
            self._input = self._frame.unused_data + self._input
            self._frame = None

    def close(self) -> None:
        self._raw.close()
        super().close()


def zstd_stream_reader(raw: BinaryIO) -> BinaryIO:
    """A buffered reader of the decompressed bytes of ``raw`` (lines can be iterated). Closing
    it closes ``raw``."""
    return io.BufferedReader(_ZstdFrames(raw))
