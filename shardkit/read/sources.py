"""Where a shard's bytes come from: a local file (``pread``) or a store (range requests); and a
cached shard's file, checked at use.

Reading a shard out of a shared cache dir: every byte checked at use, against a chain rooted
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
from shardkit.read.shard_blocks import ByteSource, index_from_suffix
from shardkit.storage import Store
from shardkit.storage.local_files import open_regular_file


class LocalFileSource:
    """A local regular file kept open; ``read_range`` copies with ``pread`` into bytes this
    process owns. A FIFO, device or directory is refused on open, naming it
    (storage/local_files.py).

    Never memory-mapped (RP2, specs/read-path.md): a mapped shard's touched pages count in the
    reading process's resident set until the last view of the map dies, so RSS grew with the
    shards a window touched, not with what the consumer holds. A block read is one ``pread``;
    the copy is what a range request makes anyway. Thread-safe."""

    thread_safe = True

    def __init__(self, path: str) -> None:
        self.where = path
        self._fd = -1
        self._fd, self._size = open_regular_file(path, "shard file")

    def size(self) -> int:
        return self._size

    def stat(self) -> os.stat_result:
        """``fstat`` of the file this source reads (not of whatever its path names now)."""
        return os.fstat(self._fd)

    def read_into(self, buffer: bytearray, offset: int) -> int:
        """Copy bytes from ``offset`` into ``buffer`` (reused across calls); the count read."""
        return os.preadv(self._fd, [buffer], offset)

    def read_range(self, start: int, end: int) -> bytes:
        if start < 0 or end > self._size or start > end:
            raise OSError(f"{self.where}: short read at [{start}, {end}) of a {self._size}-byte file")
        if start == end:
            return b""
        data = os.pread(self._fd, end - start, start)
        if len(data) != end - start:
            raise OSError(f"{self.where}: short read at [{start}, {end}): got {len(data)} bytes (file shrank?)")
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


class StoreSource:
    """An object in a store, read with range requests (no local copy). Thread-safe (the store
    is); ``ranged``: a reader fetches its blocks ahead with concurrent requests (K33)."""

    ranged = True

    def __init__(self, store: Store, name: str, size: int | None = None) -> None:
        self.where = store.url_of(name)
        self._store = store
        self._name = name
        self._size = size

    def size(self) -> int:
        if self._size is None:
            self._size = self._store.size(self._name)
        return self._size

    def read_range(self, start: int, end: int) -> bytes:
        return self._store.read_range(self._name, start, end)

    def close(self) -> None:
        pass


def open_source(store: Store, name: str, size: int | None = None) -> ByteSource:
    """A local file source for local stores, else range requests on the store."""
    local = store.local_path(name)
    if local is not None:
        return LocalFileSource(local)
    return StoreSource(store, name, size)


class MemorySource:
    """Bytes already in memory (verification reads each shard whole once)."""

    def __init__(self, data: bytes, where: str) -> None:
        self.where = where
        self._data = data

    def size(self) -> int:
        return len(self._data)

    def read_range(self, start: int, end: int) -> bytes:
        if end > len(self._data):
            raise OSError(f"{self.where}: short read at [{start}, {end}) of {len(self._data)} bytes")
        return self._data[start:end]

    def close(self) -> None:
        pass


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

