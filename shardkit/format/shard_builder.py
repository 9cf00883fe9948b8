"""Assemble one shard file from compressed blocks (pure; the writer does the I/O)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardkit.format.checksum import xxh64_int, xxh64_text
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
    """One block ready for a shard: its codec, stored bytes and sample offsets in the raw block."""

    codec: int
    stored: bytes
    raw_size: int
    sample_offsets: np.ndarray  # uint32, num_samples + 1 entries, first 0, last raw_size

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


def build_shard(name: str, blocks: list[SealedBlock]) -> tuple[bytes, ShardInfo]:
    """The bytes of a shard holding ``blocks`` in order, and its manifest entry."""
    table = np.zeros(len(blocks), dtype=BLOCK_DTYPE)
    offset = HEADER_SIZE
    for i, block in enumerate(blocks):
        stored = block.stored
        table[i] = (offset, len(stored), block.raw_size, block.num_samples, block.codec, b"", xxh64_int(stored))
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
