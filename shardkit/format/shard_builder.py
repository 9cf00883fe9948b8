"""Assemble one shard file from compressed blocks (pure; the writer does the I/O)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardkit.format.block_codec import BlockCompressor
from shardkit.format.checksum import xxh64_int, xxh64_text
from shardkit.format.column_block import LAYOUT_COLUMNS, LAYOUT_ROWS, rows_to_columns
from shardkit.format.manifest import ShardInfo
from shardkit.format.shard_layout import (
    BLOCK_DTYPE,
    FOOTER_SIZE,
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

    @property
    def num_samples(self) -> int:
        return len(self.sample_offsets) - 1


def join_samples(encoded: list[bytes]) -> tuple[bytes, np.ndarray]:
    """A block's raw bytes (the encoded samples back to back) and their u32 offsets (n + 1)."""
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 1 << 32:
        raise ValueError(f"block of {offsets[-1]} bytes exceeds 4 GiB; lower block_size")
    return b"".join(encoded), offsets.astype("<u4")


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


def build_shard(name: str, blocks: list[SealedBlock]) -> tuple[bytes, ShardInfo]:
    """The bytes of a shard holding ``blocks`` in order, and its manifest entry."""
    table = np.zeros(len(blocks), dtype=BLOCK_DTYPE)
    offset = HEADER_SIZE
    for i, block in enumerate(blocks):
        stored = block.stored
        table[i] = (offset, len(stored), block.raw_size, block.num_samples, block.codec, block.layout, b"",
                    xxh64_int(stored))
        offset += len(block.stored)
    offsets = np.concatenate([b.sample_offsets for b in blocks]) if blocks else np.zeros(0, "<u4")
    index = encode_index(table, offsets)
    parts = [encode_header(), *(b.stored for b in blocks), index, encode_footer(offset, index)]
    data = b"".join(parts)
    info = ShardInfo(
        name=name,
        num_samples=int(table["num_samples"].sum()),
        num_bytes=len(data),
        num_blocks=len(blocks),
        raw_bytes=sum(b.raw_size for b in blocks),
        index_bytes=len(index) + FOOTER_SIZE,
        checksum=xxh64_text(data),
    )
    return data, info
