"""A shard's storage blocks: fetched (one range request per run of adjacent blocks), checked
against their xxh64 (I5) and size limits (I12), and decompressed (I7).

``ShardBlocks`` is the block half of ``ShardReader`` (read/shard_reader.py), which turns blocks
into samples. Thread-safety: ``fetch_stored_blocks`` is thread-safe when the source is; blocks
are decompressed with the calling thread's zstd context (``thread_decompressor``: one per thread,
not one per reader), so the read-ahead helper thread uses its own.
"""

from __future__ import annotations

from shardkit.errors import CorruptShardError, FormatError
from shardkit.format import BlockDecompressor
from shardkit.format.block_codec import CODEC_RAW, check_block_size, thread_decompressor
from shardkit.format.checksum import xxh64_int
from shardkit.format.column_block import LAYOUT_COLUMNS
from shardkit.format.shard_layout import ShardIndex
from shardkit.read.sources import ByteSource

ZSTD_SLACK = 1 << 20  # a zstd frame may be a little larger than its content (incompressible)


class ShardBlocks:
    """Block access for a reader that has set ``source``, ``index``, ``where`` and
    ``max_block_bytes``."""

    source: ByteSource
    index: ShardIndex
    where: str
    max_block_bytes: int

    def read_stored_block(self, block_index: int) -> bytes | memoryview:
        """The stored bytes of one block, checksum-verified (I5)."""
        return self.fetch_stored_blocks(block_index, block_index + 1)[0]

    def fetch_stored_blocks(self, first: int, stop: int) -> list[bytes | memoryview]:
        """The stored bytes of the adjacent blocks ``[first, stop)``, read with one range request
        and each checksum-verified (I5). Thread-safe when the source is."""
        blocks = self.index.blocks
        for block_index in range(first, stop):
            self._check_block_size(block_index)
        start = int(blocks[first]["offset"])
        end = int(blocks[stop - 1]["offset"]) + int(blocks[stop - 1]["stored_size"])
        try:
            data = self.source.read_range(start, end)
        except Exception as exc:  # the store's error names the URL and range; add the blocks
            more = f" to block {stop - 1}" if stop - first > 1 else ""
            exc.add_note(f"reading {self.where}: {self._block_label(first)}{more}")
            raise
        view = memoryview(data) if stop - first > 1 else data
        pieces = []
        for block_index in range(first, stop):
            offset = int(blocks[block_index]["offset"]) - start
            stored = view[offset : offset + int(blocks[block_index]["stored_size"])] if stop - first > 1 else data
            if xxh64_int(stored) != int(blocks[block_index]["checksum"]):
                raise CorruptShardError(f"{self.where}: {self._block_label(block_index)}: checksum mismatch")
            pieces.append(stored)
        return pieces

    def _check_block_size(self, block_index: int) -> None:
        """I12, before anything is read: the raw size, and the stored size (a raw block's stored
        bytes are its raw bytes; a zstd frame is at most a little larger than its content)."""
        block = self.index.blocks[block_index]
        try:
            check_block_size(int(block["raw_size"]), self.max_block_bytes)
            check_block_size(int(block["stored_size"]) - ZSTD_SLACK, self.max_block_bytes)
        except CorruptShardError as exc:
            raise CorruptShardError(f"{self.where}: {self._block_label(block_index)}: {exc}") from None

    def _block_label(self, block_index: int) -> str:
        """``block 3 (samples 40..52) at offset 1234``, for errors."""
        first = int(self.index.first_sample[block_index])
        last = int(self.index.first_sample[block_index + 1]) - 1
        offset = int(self.index.blocks[block_index]["offset"])
        return f"block {block_index} (samples {first}..{last}) at offset {offset}"

    def decode_stored_block(self, block_index: int, stored: bytes | memoryview,
                            decompressor: BlockDecompressor | None = None,
                            stop: int | None = None) -> bytes | memoryview:
        """``decompressor``: a zstd context (default: the calling thread's, ``thread_decompressor``).
        ``stop``: only the samples before shard sample ``stop`` are wanted; a row block is then
        decompressed only as far as they reach (P21)."""
        block = self.index.blocks[block_index]
        codec = int(block["codec"])
        prefix = self._raw_end(block_index, stop) if codec != CODEC_RAW else None  # raw: nothing to spare
        try:
            return (decompressor or thread_decompressor(self.max_block_bytes)).decompress(
                codec, stored, int(block["raw_size"]), prefix)
        except FormatError as exc:
            raise type(exc)(f"{self.where}: {self._block_label(block_index)}: {exc}") from None

    def _raw_end(self, block_index: int, stop: int | None) -> int | None:
        """The raw bytes of row block ``block_index`` that hold its samples before shard sample
        ``stop``; None for all of them (always for a column block: its columns span the block)."""
        if stop is None:
            return None
        local = stop - int(self.index.first_sample[block_index])
        block = self.index.blocks[block_index]
        if local >= int(block["num_samples"]) or int(block["layout"]) == LAYOUT_COLUMNS:
            return None
        return int(self.index.offsets_of(block_index)[local])

    def read_raw_block(self, block_index: int) -> bytes | memoryview:
        return self.decode_stored_block(block_index, self.read_stored_block(block_index))

    def raw_block_ahead(self, block_index: int, stop: int | None = None) -> bytes | memoryview:
        """``read_raw_block`` for the read-ahead thread (its own zstd context); ``stop`` as for
        ``decode_stored_block``."""
        return self.decode_stored_block(block_index, self.read_stored_block(block_index), stop=stop)
