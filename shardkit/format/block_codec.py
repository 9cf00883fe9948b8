"""Block codec: a block's raw bytes (concatenated msgpack samples) ⇄ its stored bytes.

Codec ids (specs/shard-format.md §3): 0 = raw (stored as is), 1 = zstd (one frame with the
content size in its header). ``"auto"`` tries zstd on a probe of the block first and stores the
block raw when zstd cannot shrink it meaningfully, so incompressible payloads (JPEG, audio)
never pay for decompression.

Thread-safety: ``BlockCompressor``/``BlockDecompressor`` hold zstd contexts; use one per thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import zstandard

from shardkit.errors import CorruptShardError, FormatError
from shardkit.format.limits import MAX_BLOCK_BYTES, check_block_limit

CODEC_RAW = 0
CODEC_ZSTD = 1
CODEC_NAMES = {CODEC_RAW: "raw", CODEC_ZSTD: "zstd"}
COMPRESSIONS = ("auto", "zstd", "none")
_PROBE_BYTES = 64 << 10


@dataclass(frozen=True)
class CompressOptions:
    """``compression``: auto | zstd | none. ``min_saving``: auto keeps zstd only if it saves
    at least this fraction of the block."""

    compression: str = "auto"
    level: int = 3
    min_saving: float = 0.05

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, got {self.compression!r}")
        if not -7 <= self.level <= 22:
            raise ValueError(f"zstd level must be in [-7, 22], got {self.level}")


class BlockCompressor:
    def __init__(self, options: CompressOptions) -> None:
        self.options = options
        self._zstd = zstandard.ZstdCompressor(level=options.level, write_content_size=True)

    def compress(self, raw: bytes) -> tuple[int, bytes]:
        """``(codec, stored_bytes)`` for one block. Deterministic for the same options."""
        mode = self.options.compression
        if mode == "none" or not raw:
            return CODEC_RAW, raw
        if mode == "auto" and len(raw) > 2 * _PROBE_BYTES:
            probe = raw[:_PROBE_BYTES]
            if len(self._zstd.compress(probe)) > len(probe) * (1 - self.options.min_saving):
                return CODEC_RAW, raw
        stored = self._zstd.compress(raw)
        if mode == "auto" and len(stored) > len(raw) * (1 - self.options.min_saving):
            return CODEC_RAW, raw
        return CODEC_ZSTD, stored


def check_block_size(raw_size: int, max_block_bytes: int) -> None:
    """I12: refuse a block that declares more raw bytes than a reader accepts."""
    if raw_size > max_block_bytes:
        raise CorruptShardError(
            f"block declares {raw_size} raw bytes, more than the maximum block size {max_block_bytes} "
            f"(I12; a reader's max_block_bytes or SHARDKIT_MAX_BLOCK_BYTES raises it)"
        )


class BlockDecompressor:
    """``max_block_bytes``: blocks declaring more raw bytes are refused before any work (I12)."""

    def __init__(self, max_block_bytes: int = MAX_BLOCK_BYTES) -> None:
        self._zstd = zstandard.ZstdDecompressor()
        self.max_block_bytes = check_block_limit(max_block_bytes)

    def decompress(self, codec: int, stored: bytes | memoryview, raw_size: int,
                   prefix: int | None = None) -> bytes | memoryview:
        """The raw block; never produces more than ``raw_size`` bytes (no decompression bombs),
        nor more than ``max_block_bytes``. ``prefix``: only the block's first ``prefix`` bytes
        are wanted, and a zstd frame is decompressed that far only (a reader that needs the
        first samples of a block; specs/partition.md P21)."""
        check_block_size(raw_size, self.max_block_bytes)
        if codec == CODEC_RAW:
            if len(stored) != raw_size:
                raise CorruptShardError(f"raw block is {len(stored)} bytes, index says {raw_size}")
            return stored
        if codec != CODEC_ZSTD:
            raise FormatError(f"unknown block codec {codec}")
        try:
            declared = zstandard.frame_content_size(stored)
        except zstandard.ZstdError:
            declared = -1  # not a zstd frame header at all
        if declared != raw_size:
            raise CorruptShardError(
                f"zstd frame declares {declared} bytes, index says {raw_size} (refusing to decompress)"
            )
        want = raw_size if prefix is None or prefix >= raw_size else max(prefix, 0)
        try:
            raw = self._zstd.decompress(stored, max_output_size=raw_size) if want == raw_size \
                else self._zstd_prefix(stored, want)
        except zstandard.ZstdError as exc:
            raise CorruptShardError(f"zstd block does not decompress: {exc}") from None
        if len(raw) != want:
            raise CorruptShardError(f"block decompressed to {len(raw)} bytes, index says {raw_size}")
        return raw

    def _zstd_prefix(self, stored: bytes | memoryview, want: int) -> bytes:
        """The first ``want`` bytes of a zstd frame, decompressing no further (zstd's blocks are
        at most 128 KiB: the frame is decoded up to the one holding byte ``want``)."""
        parts: list[bytes] = []
        got = 0
        with self._zstd.stream_reader(stored, read_across_frames=False) as reader:
            while got < want:
                part = reader.read(want - got)
                if not part:
                    break
                parts.append(part)
                got += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)


_per_thread = threading.local()


def thread_decompressor(max_block_bytes: int = MAX_BLOCK_BYTES) -> BlockDecompressor:
    """This thread's decompressor for ``max_block_bytes``, made once per thread instead of once
    per shard reader (a zstd context costs tens of microseconds, and a spread read opens about
    ``spread`` times as many shards: specs/partition.md P21). Safe: a thread makes one
    decompression call at a time, and no call keeps state between calls."""
    found: dict[int, BlockDecompressor] | None = getattr(_per_thread, "decompressors", None)
    if found is None:
        found = _per_thread.decompressors = {}
    decompressor = found.get(max_block_bytes)
    if decompressor is None:
        decompressor = found[max_block_bytes] = BlockDecompressor(max_block_bytes)
    return decompressor
