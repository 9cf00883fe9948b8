"""Opening a shard: its footer and index, read with one suffix request and checked (I3-I6, M8).

The suffix's length is in the manifest (``ShardInfo.index_bytes``), so opening a shard listed
in one costs exactly one request; without it a 64 KiB guess, and a second request when the
index is longer. Opening is the fixed cost a spread read pays once per span (specs/partition.md
P21), so nothing here copies the suffix: the footer and index are read from the source's bytes
(for a local shard, the bytes of one ``pread``; no file is mapped, specs/read-path.md RP2).
"""

from __future__ import annotations

import os

from shardkit.errors import CorruptShardError
from shardkit.format import ShardInfo
from shardkit.format.limits import MAX_BLOCK_BYTES, MAX_BLOCK_BYTES_ENV, check_block_limit
from shardkit.format.shard_layout import FOOTER_SIZE, HEADER_SIZE, ShardIndex, decode_footer, decode_index
from shardkit.read.sources import ByteSource

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
    tail = memoryview(source.read_range(start, size))
    index_offset, index_length, checksum = decode_footer(tail, size, where)
    if index_offset < start:  # index longer than guessed: one more request
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
