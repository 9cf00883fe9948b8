"""Reading a shard out of a shared cache dir: every byte checked at use, against a chain rooted
in the manifest (specs/cache.md K45).

A cache dir is shared by a group, and a member can replace any entry (rename) or, where the
modes let them, write one in place — its owner always can. So nothing a cached file says
about itself is believed: the file's whole-file xxh64 must be the manifest's ``checksum`` for
the shard, and the index (block offsets, sizes, checksums) is decoded from the bytes of that
very pass, read with ``pread`` from the descriptor the reader keeps. From then on the reader
uses that index, never the file's (a later in-place write cannot change it), and reads every
block by ``pread`` into its own memory, where it is checked against the index's xxh64 and then
decoded: bytes that change after their check are never the bytes used.

The checked index of a file is kept per process by the file's identity (device, inode, size,
owner) and the expected checksum, so a file is hashed whole once per process, not once per
open; a file renamed over the entry is another inode and is checked anew. An identity reused
by another file (an inode number freed and reused) changes nothing: its blocks are checked
against the kept index and fail.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from shardkit.errors import CorruptShardError
from shardkit.format import ShardInfo
from shardkit.format.checksum import StreamingChecksum
from shardkit.format.shard_layout import FOOTER_SIZE, HEADER_SIZE, ShardIndex
from shardkit.read.shard_blocks import index_from_suffix
from shardkit.read.sources import LocalFileSource

_CHUNK = 1 << 20
_KEPT_BYTES = 64 << 20  # checked indexes kept per process (an evicted one costs a re-hash)

_Key = tuple[int, int, int, int, str]


# Checked indexes by file identity, least recently used out past _KEPT_BYTES (thread-safe).
_kept: OrderedDict[_Key, tuple[ShardIndex, int]] = OrderedDict()
_kept_lock = threading.Lock()
_kept_bytes = 0


def _new_lock() -> None:
    """A DataLoader worker forked while another thread held the lock must not inherit it held."""
    global _kept_lock
    _kept_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock)


def _kept_index(key: _Key) -> ShardIndex | None:
    with _kept_lock:
        found = _kept.get(key)
        if found is None:
            return None
        _kept.move_to_end(key)
        return found[0]


def _keep_index(key: _Key, index: ShardIndex) -> None:
    global _kept_bytes
    cost = index.blocks.nbytes + index.sample_offsets.nbytes + index.first_sample.nbytes
    with _kept_lock:
        old = _kept.pop(key, None)
        if old is not None:
            _kept_bytes -= old[1]
        _kept[key] = (index, cost)
        _kept_bytes += cost
        while _kept_bytes > _KEPT_BYTES and len(_kept) > 1:
            _, (_, dropped) = _kept.popitem(last=False)
            _kept_bytes -= dropped


def open_checked(path: str, info: ShardInfo, fresh: bool = False) -> tuple[LocalFileSource, ShardIndex]:
    """A copying (``pread``) source of the cached shard at ``path`` and its index, checked
    against ``info`` from the manifest (K45); ``CorruptShardError`` naming the file otherwise.
    ``fresh``: hash the file even if this process checked it before (the cache's own check,
    which decides whether to download again, K2)."""
    source = LocalFileSource(path)
    try:
        return source, checked_index(source, info, fresh)
    except BaseException:
        source.close()
        raise


def checked_index(source: LocalFileSource, info: ShardInfo, fresh: bool = False) -> ShardIndex:
    """The index of the file ``source`` reads, from a pass whose xxh64 is ``info.checksum``."""
    st = source.stat()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_uid, info.checksum)
    index = None if fresh else _kept_index(key)
    if index is None:
        index = _hash_and_index(source, info)
        _keep_index(key, index)
    return index


def _hash_and_index(source: LocalFileSource, info: ShardInfo) -> ShardIndex:
    where = f"shard {info.name} (cached file {source.where})"
    size = source.size()
    if size != info.num_bytes:
        raise CorruptShardError(f"{where}: {size} bytes, manifest says {info.num_bytes}")
    suffix_start = max(HEADER_SIZE, size - max(info.index_bytes, FOOTER_SIZE))  # as read_shard_index
    suffix = bytearray()
    checksum = StreamingChecksum()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    offset = 0
    while offset < size:
        got = source.read_into(buffer, offset)
        if got <= 0:
            raise CorruptShardError(f"{where}: file ends at {offset} bytes while checking it (truncated?)")
        piece = view[:min(got, size - offset)]
        checksum.update(piece)
        if offset + len(piece) > suffix_start:
            suffix += piece[max(0, suffix_start - offset):]
        offset += len(piece)
    if checksum.text() != info.checksum:
        raise CorruptShardError(f"{where}: checksum {checksum.text()}, manifest says {info.checksum}")
    return index_from_suffix(memoryview(bytes(suffix)), suffix_start, size, info, where)

