"""The shard file layout, v1 (specs/shard-format.md). Pure bytes ⇄ structures.

::

    offset 0        header, 16 bytes: magic "SKSHARD\\0", u16 major, u16 minor, u32 flags (0)
    offset 16       block 0 | block 1 | … | block n-1        (contiguous stored blocks, I3)
    index_offset    index: msgpack map {"num_samples", "blocks", "sample_offsets"}
    size - 32       footer, 32 bytes: u64 index_offset, u32 index_length, u32 flags (0),
                    u64 xxh64(index), u16 major, u16 minor, magic "SKFT"

``blocks`` is a packed array of 32-byte records (``BLOCK_DTYPE``); ``sample_offsets`` holds,
for each block, ``num_samples + 1`` u32 offsets of its samples inside the raw block.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import msgpack
import numpy as np

from shardkit.errors import CorruptShardError, UnsupportedVersionError
from shardkit.format.checksum import xxh64_int

MAGIC = b"SKSHARD\x00"
FOOTER_MAGIC = b"SKFT"
VERSION = (1, 1)
HEADER = struct.Struct("<8sHHI")
FOOTER = struct.Struct("<QIIQHH4s")
HEADER_SIZE = HEADER.size  # 16
FOOTER_SIZE = FOOTER.size  # 32
BLOCK_DTYPE = np.dtype(
    [
        ("offset", "<u8"),
        ("stored_size", "<u4"),
        ("raw_size", "<u4"),
        ("num_samples", "<u4"),
        ("codec", "u1"),
        ("layout", "u1"),  # 0 rows, 1 columns (format 1.1; 0 in 1.0 files, whose byte was reserved)
        ("reserved", "V2"),
        ("checksum", "<u8"),
    ]
)
MAX_INDEX_BYTES = 1 << 30
MAX_LAYOUT = 1  # 0 = rows, 1 = columns (format/column_block.py)


def encode_header() -> bytes:
    return HEADER.pack(MAGIC, VERSION[0], VERSION[1], 0)


def check_header(data: bytes, where: str) -> None:
    if len(data) < HEADER_SIZE:
        raise CorruptShardError(f"{where}: {len(data)} bytes, too short for a shard header")
    magic, major, minor, _ = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptShardError(f"{where}: bad magic {magic!r} at offset 0, expected {MAGIC!r}")
    _check_version(major, minor, where)


def _check_version(major: int, minor: int, where: str) -> None:
    if major != VERSION[0]:
        raise UnsupportedVersionError(
            f"{where}: shard format {major}.{minor}; this shardkit reads {VERSION[0]}.x"
        )


@dataclass(frozen=True)
class ShardIndex:
    """A shard's block table and sample offsets, as read from its footer."""

    num_samples: int
    blocks: np.ndarray  # BLOCK_DTYPE records
    sample_offsets: np.ndarray  # uint32, concatenated per block (num_samples + 1 each)
    first_sample: np.ndarray  # int64, first sample index of each block, plus the total

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @cached_property
    def starts(self) -> list[int]:
        """``first_sample`` as Python ints: a run's per-span look-ups index it without numpy."""
        found: list[int] = self.first_sample.tolist()
        return found

    @cached_property
    def table(self) -> dict[str, list[Any]]:
        """The block table's fields as Python lists (``table["raw_size"][b]``): per-block look-ups
        on the read path without a numpy record access each."""
        return {name: self.blocks[name].tolist() for name in self.blocks.dtype.names or ()}

    def block_of(self, sample_index: int) -> int:
        return bisect.bisect_right(self.starts, sample_index) - 1

    def offsets_of(self, block_index: int) -> np.ndarray:
        start = self.starts[block_index] + block_index
        return self.sample_offsets[start : start + self.table["num_samples"][block_index] + 1]


def encode_index(blocks: np.ndarray, sample_offsets: np.ndarray) -> bytes:
    num_samples = int(blocks["num_samples"].sum()) if len(blocks) else 0
    return msgpack.packb(
        {
            "num_samples": num_samples,
            "blocks": blocks.astype(BLOCK_DTYPE).tobytes(),
            "sample_offsets": sample_offsets.astype("<u4").tobytes(),
        },
        use_bin_type=True,
    )


def encode_footer(index_offset: int, index: bytes) -> bytes:
    return FOOTER.pack(index_offset, len(index), 0, xxh64_int(index), VERSION[0], VERSION[1], FOOTER_MAGIC)


def decode_footer(tail: bytes | memoryview, file_size: int, where: str) -> tuple[int, int, int]:
    """``(index_offset, index_length, index_checksum)`` from the last 32 bytes of a shard."""
    if file_size < HEADER_SIZE + FOOTER_SIZE or len(tail) < FOOTER_SIZE:
        raise CorruptShardError(f"{where}: {file_size} bytes, too short for a shard (truncated?)")
    offset, length, _, checksum, major, minor, magic = FOOTER.unpack_from(tail, len(tail) - FOOTER_SIZE)
    if magic != FOOTER_MAGIC:
        raise CorruptShardError(
            f"{where}: bad footer magic {magic!r} at offset {file_size - 4}, expected {FOOTER_MAGIC!r}"
            " (truncated or not a shardkit shard?)"
        )
    _check_version(major, minor, where)
    if length > MAX_INDEX_BYTES or offset < HEADER_SIZE or offset + length != file_size - FOOTER_SIZE:
        raise CorruptShardError(
            f"{where}: footer places the index at [{offset}, {offset + length}) in a "
            f"{file_size}-byte file"
        )
    return offset, length, checksum


def decode_index(index: bytes | memoryview, checksum: int, index_offset: int, where: str) -> ShardIndex:
    if xxh64_int(index) != checksum:
        raise CorruptShardError(f"{where}: index checksum mismatch at offset {index_offset}")
    try:
        fields = msgpack.unpackb(index, raw=False)
        blocks = np.frombuffer(fields["blocks"], dtype=BLOCK_DTYPE)
        offsets = np.frombuffer(fields["sample_offsets"], dtype="<u4")
        num_samples = int(fields["num_samples"])
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptShardError(f"{where}: unreadable index: {exc}") from None
    first = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum(blocks["num_samples"], out=first[1:])
    _check_index(blocks, offsets, first, num_samples, index_offset, where)
    return ShardIndex(num_samples, blocks, offsets, first)


def _check_index(
    blocks: np.ndarray, offsets: np.ndarray, first: np.ndarray, num_samples: int, end: int, where: str
) -> None:
    """I3/I4: blocks are contiguous from the header to the index; counts agree. Vectorised with
    few array operations: every reader checks the index of every shard it opens, and a spread
    read opens about `spread` times as many shards (specs/partition.md P21)."""
    if int(first[-1]) != num_samples or len(offsets) != num_samples + len(blocks):
        raise CorruptShardError(f"{where}: index counts disagree ({num_samples} samples)")
    if not len(blocks):
        if end != HEADER_SIZE:
            raise CorruptShardError(f"{where}: blocks end at {HEADER_SIZE}, index starts at {end}")
        return
    _check_offsets(blocks, offsets, first, where)
    unknown = blocks["layout"] > MAX_LAYOUT
    if np.count_nonzero(unknown):  # count_nonzero: a plain C call, cheaper than a ufunc reduction
        i = int(np.argmax(unknown))
        raise UnsupportedVersionError(
            f"{where}: block {i} has layout {int(blocks['layout'][i])}; this shardkit "
            f"reads layouts 0..{MAX_LAYOUT} (format {VERSION[0]}.{VERSION[1]})"
        )
    stored = blocks["stored_size"].astype(np.int64)
    starts = np.cumsum(stored)  # each block's end, then (in place) its expected start
    expected = HEADER_SIZE + int(starts[-1])
    starts -= stored
    starts += HEADER_SIZE
    misplaced = blocks["offset"].astype(np.int64) != starts
    if np.count_nonzero(misplaced):
        i = int(np.argmax(misplaced))
        raise CorruptShardError(f"{where}: block {i} at offset {int(blocks[i]['offset'])}, expected {int(starts[i])}")
    if expected != end:
        raise CorruptShardError(f"{where}: blocks end at {expected}, index starts at {end}")


def _check_offsets(blocks: np.ndarray, offsets: np.ndarray, first: np.ndarray, where: str) -> None:
    """I6: each block's sample offsets start at 0, never decrease and end at its raw size, so
    no sample slice reaches outside its block (checked once per index, vectorised)."""
    starts = first[:-1] + np.arange(len(blocks))  # position of each block's offset 0
    ends = starts + blocks["num_samples"]
    falling = offsets[1:] < offsets[:-1]
    falling[ends[:-1]] = False  # the jump from one block's last offset to the next block's first
    if np.count_nonzero(offsets[starts]) or np.count_nonzero(offsets[ends] != blocks["raw_size"]) \
            or np.count_nonzero(falling):
        raise CorruptShardError(f"{where}: sample offsets in the index are not within their blocks")
