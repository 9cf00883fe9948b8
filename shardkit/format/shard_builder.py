"""Assemble one shard file from compressed blocks (pure; the writer does the I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardkit.errors import EncodeError
from shardkit.format.block_codec import BlockCompressor
from shardkit.format.checksum import StreamingChecksum, xxh64_int
from shardkit.format.column_block import LAYOUT_COLUMNS, LAYOUT_ROWS, rows_to_columns
from shardkit.format.column_parse import offsets_from_lengths
from shardkit.format.limits import MAX_BLOCK_BYTES
from shardkit.format.manifest import ShardInfo
from shardkit.format.shard_layout import (
    BLOCK_DTYPE,
    HEADER_SIZE,
    encode_footer,
    encode_header,
    encode_index,
)


@dataclass(frozen=True)
class SealedBlock:
    """One block ready for a shard: its codec, stored bytes, sample offsets in the raw block
    and layout (rows, or columns whose sample offsets are 0 … 0, raw_size: I6, I9)."""

    codec: int
    stored: bytes
    raw_size: int
    sample_offsets: np.ndarray  # uint32, num_samples + 1 entries, first 0, last raw_size
    layout: int = LAYOUT_ROWS
    checksum: int = field(init=False)  # xxh64 of ``stored`` (I5), on the thread that seals it

    def __post_init__(self) -> None:
        object.__setattr__(self, "checksum", xxh64_int(self.stored))

    @property
    def num_samples(self) -> int:
        return len(self.sample_offsets) - 1


def join_samples(encoded: list[bytes]) -> tuple[bytes, np.ndarray]:
    """A block's raw bytes (the encoded samples back to back) and their u32 offsets (n + 1)."""
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    offsets = offsets_from_lengths(lengths)
    if offsets[-1] >= 1 << 32:
        raise ValueError(f"block of {offsets[-1]} bytes exceeds 4 GiB; lower block_size")
    return b"".join(encoded), offsets.astype("<u4")


def seal_first(pending_bytes: int, sample_bytes: int, sample_index: int,
               max_block_bytes: int = MAX_BLOCK_BYTES) -> bool:
    """I12, for every writer: whether the pending block must be sealed before a sample of
    ``sample_bytes`` joins it (it would take the block past ``max_block_bytes``); a sample
    larger than a whole block is an ``EncodeError`` naming it."""
    if sample_bytes > max_block_bytes:
        raise EncodeError(
            f"sample {sample_index}: encodes to {sample_bytes} bytes, more than the maximum block "
            f"size {max_block_bytes} (I12); split it into several samples"
        )
    return pending_bytes > 0 and pending_bytes + sample_bytes > max_block_bytes


LAYOUT_CHOICES = ("auto", "rows")


def arrange_block(encoded: list[bytes], layout: str = "auto") -> tuple[bytes, np.ndarray, int]:
    """A block's raw bytes, sample offsets and layout: columns when ``layout="auto"`` and the
    samples make a column block no larger than their rows (column_block.py), else rows."""
    raw, offsets = join_samples(encoded)
    if layout == "auto":
        columns = rows_to_columns(raw, len(encoded))
        if columns is not None:
            offsets = np.zeros(len(encoded) + 1, dtype="<u4")
            offsets[-1] = len(columns)
            return columns, offsets, LAYOUT_COLUMNS
    elif layout != "rows":
        raise ValueError(f"block layout must be one of {LAYOUT_CHOICES}, got {layout!r}")
    return raw, offsets, LAYOUT_ROWS


def seal_block(raw: bytes, offsets: np.ndarray, layout: int, compressor: BlockCompressor) -> SealedBlock:
    codec, stored = compressor.compress(raw)
    return SealedBlock(codec, stored, len(raw), offsets, layout)


class ShardAssembler:
    """One shard, built block by block so that a writer can stream it to a file instead of
    holding it whole: ``header()``, then ``add(block)`` per block in order, then ``finish()``;
    each returns the bytes to append. The bytes are exactly ``build_shard``'s (W1)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._checksum = StreamingChecksum()
        self._records: list[tuple[object, ...]] = []
        self._sample_offsets: list[np.ndarray] = []
        self._offset = HEADER_SIZE
        self._raw_bytes = 0

    def header(self) -> bytes:
        data = encode_header()
        self._checksum.update(data)
        return data

    def add(self, block: SealedBlock) -> bytes:
        stored = block.stored
        self._records.append((self._offset, len(stored), block.raw_size, block.num_samples, block.codec,
                              block.layout, b"", block.checksum))
        self._sample_offsets.append(block.sample_offsets)
        self._offset += len(stored)
        self._raw_bytes += block.raw_size
        self._checksum.update(stored)
        return stored

    def finish(self) -> tuple[bytes, ShardInfo]:
        """The index and footer, and the shard's manifest entry."""
        table = np.array(self._records, dtype=BLOCK_DTYPE) if self._records else np.zeros(0, BLOCK_DTYPE)
        offsets = np.concatenate(self._sample_offsets) if self._records else np.zeros(0, "<u4")
        index = encode_index(table, offsets)
        tail = index + encode_footer(self._offset, index)
        self._checksum.update(tail)
        info = ShardInfo(
            name=self.name,
            num_samples=int(table["num_samples"].sum()),
            num_bytes=self._offset + len(tail),
            num_blocks=len(self._records),
            raw_bytes=self._raw_bytes,
            index_bytes=len(tail),
            checksum=self._checksum.text(),
        )
        return tail, info


def build_shard(name: str, blocks: list[SealedBlock]) -> tuple[bytes, ShardInfo]:
    """The bytes of a shard holding ``blocks`` in order, and its manifest entry."""
    assembler = ShardAssembler(name)
    parts = [assembler.header(), *(assembler.add(block) for block in blocks)]
    tail, info = assembler.finish()
    parts.append(tail)
    return b"".join(parts), info
