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
from shardkit.read.shard_index_read import read_shard_index
from shardkit.read.sources import LocalFileSource

_CHUNK = 1 << 20
_KEPT_BYTES = 64 << 20  # checked indexes kept per process (an evicted one costs a re-hash)

_Key = tuple[int, int, int, int, str]


class _CheckedIndexes:
    """Thread-safe, size-bounded (least recently used out) map of checked indexes."""

    def __init__(self, limit_bytes: int) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[_Key, tuple[ShardIndex, int]] = OrderedDict()
        self._bytes, self._limit = 0, limit_bytes
        # A DataLoader worker forked while another thread held the lock must not inherit it held.
        os.register_at_fork(after_in_child=self._new_lock)

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def get(self, key: _Key) -> ShardIndex | None:
        with self._lock:
            found = self._kept.get(key)
            if found is None:
                return None
            self._kept.move_to_end(key)
            return found[0]

    def put(self, key: _Key, index: ShardIndex) -> None:
        cost = index.blocks.nbytes + index.sample_offsets.nbytes + index.first_sample.nbytes
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._kept[key] = (index, cost)
            self._bytes += cost
            while self._bytes > self._limit and len(self._kept) > 1:
                _, (_, dropped) = self._kept.popitem(last=False)
                self._bytes -= dropped


_CHECKED = _CheckedIndexes(_KEPT_BYTES)


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
    index = None if fresh else _CHECKED.get(key)
    if index is None:
        index = _hash_and_index(source, info)
        _CHECKED.put(key, index)
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
    return read_shard_index(_Suffix(bytes(suffix), suffix_start, size, where), info, where)


class _Suffix:
    """The checked bytes ``[start, size)`` of a file, as a ``ByteSource`` for ``read_shard_index``."""

    def __init__(self, data: bytes, start: int, size: int, where: str) -> None:
        self.data, self.start, self._size, self.where = data, start, size, where

    def size(self) -> int:
        return self._size

    def read_range(self, start: int, end: int) -> bytes:
        if start < self.start or end > self._size:
            raise CorruptShardError(f"{self.where}: index outside the {self._size - self.start} bytes "
                                    "the manifest's index_bytes names")
        return self.data[start - self.start:end - self.start]

    def close(self) -> None:
        pass
