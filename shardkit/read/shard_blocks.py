"""A shard's footer and index, and its storage blocks.

Opening a shard: its footer and index, read with one suffix request and checked (I3-I6, M8).
The suffix's length is in the manifest (``ShardInfo.index_bytes``), so opening a shard listed
in one costs exactly one request; without it a 64 KiB guess, and a second request when the
index is longer. Opening is the fixed cost a spread read pays once per span (specs/partition.md
P21), so nothing here copies the suffix: the footer and index are read from the source's bytes
(for a local shard, the bytes of one ``pread``; no file is mapped, specs/read-path.md RP2).

Blocks: fetched (one range request per run of adjacent blocks), checked against their xxh64
(I5) and size limits (I12), and decompressed (I7).

``ShardBlocks`` is the block half of ``ShardReader`` (read/shard_reader.py), which turns blocks
into samples. Thread-safety: ``fetch_stored_blocks`` is thread-safe when the source is; blocks
are decompressed with the calling thread's zstd context (``thread_decompressor``: one per thread,
not one per reader), so the read-ahead helper thread uses its own.
"""

from __future__ import annotations

import os
from typing import Protocol

from shardkit.errors import CorruptShardError, FormatError
from shardkit.format import BlockDecompressor, ShardInfo
from shardkit.format.block_codec import CODEC_RAW, check_block_size, thread_decompressor
from shardkit.format.checksum import xxh64_int
from shardkit.format.column_block import LAYOUT_COLUMNS
from shardkit.format.limits import MAX_BLOCK_BYTES, MAX_BLOCK_BYTES_ENV, check_block_limit
from shardkit.format.shard_layout import FOOTER_SIZE, HEADER_SIZE, ShardIndex, decode_footer, decode_index


class ByteSource(Protocol):
    """Random access to one file. ``where`` names it in errors."""

    where: str

    def size(self) -> int: ...

    def read_range(self, start: int, end: int) -> bytes | memoryview: ...

    def close(self) -> None: ...


ZSTD_SLACK = 1 << 20  # a zstd frame may be a little larger than its content (incompressible)
DEFAULT_SUFFIX = 64 << 10  # bytes read from a shard's end when the manifest does not say


def resolve_max_block_bytes(max_block_bytes: int | None = None) -> int:
    """A reader's block limit (I12): ``max_block_bytes`` if given, else ``SHARDKIT_MAX_BLOCK_BYTES``
    from the environment, else ``MAX_BLOCK_BYTES`` (256 MiB, what every writer keeps to)."""
    if max_block_bytes is not None:
        return check_block_limit(max_block_bytes)
    text = os.environ.get(MAX_BLOCK_BYTES_ENV)
    if not text:
        return MAX_BLOCK_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    return check_block_limit(value, MAX_BLOCK_BYTES_ENV)


def read_shard_index(source: ByteSource, info: ShardInfo | None, where: str) -> ShardIndex:
    """The checked index of the shard ``source`` holds (``where`` names it in errors); with
    ``info``, its size and counts must agree with the manifest's (M8)."""
    size = source.size()
    if info is not None and size != info.num_bytes:
        raise CorruptShardError(f"{where}: file is {size} bytes, manifest says {info.num_bytes} (truncated?)")
    want = info.index_bytes if info is not None else DEFAULT_SUFFIX
    start = max(HEADER_SIZE, size - max(want, FOOTER_SIZE))
    if size < HEADER_SIZE + FOOTER_SIZE:
        raise CorruptShardError(f"{where}: {size} bytes, too short for a shard (truncated?)")
    return index_from_suffix(memoryview(source.read_range(start, size)), start, size, info, where, source)


def index_from_suffix(tail: memoryview, start: int, size: int, info: ShardInfo | None, where: str,
                      source: ByteSource | None = None) -> ShardIndex:
    """The checked index in ``tail``, the bytes ``[start, size)`` of a shard; an index that
    begins before ``start`` is read from ``source`` (one more request), or refused without one."""
    if size < HEADER_SIZE + FOOTER_SIZE:
        raise CorruptShardError(f"{where}: {size} bytes, too short for a shard (truncated?)")
    index_offset, index_length, checksum = decode_footer(tail, size, where)
    if index_offset < start:  # index longer than guessed
        if source is None:
            raise CorruptShardError(f"{where}: index outside the {size - start} bytes "
                                    "the manifest's index_bytes names")
        tail = memoryview(source.read_range(index_offset, size))
        start = index_offset
    index_bytes = tail[index_offset - start : index_offset - start + index_length]
    index = decode_index(index_bytes, checksum, index_offset, where)
    if info is not None:
        check_against_manifest(index, info, where)
    return index


def check_against_manifest(index: ShardIndex, info: ShardInfo, where: str) -> None:
    """M8: counts and raw sizes agree with the manifest, so the manifest bounds how much any
    block of this shard can decompress to."""
    raw_bytes = int(index.blocks["raw_size"].sum())
    found = (index.num_samples, index.num_blocks, raw_bytes)
    expected = (info.num_samples, info.num_blocks, info.raw_bytes)
    if found != expected:
        raise CorruptShardError(
            f"{where}: index holds (samples, blocks, raw bytes) {found}, manifest says {expected}"
        )


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
