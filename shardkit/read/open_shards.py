"""The shard readers one consumer holds open: a bounded LRU, closed deterministically (RP1).

A reader holds one descriptor (a local file) or two (a cached entry: its file and its lease's
flock). A mixture's sources each open their own shards, so without a bound the descriptors
grew with the number of sources: 600 sources at ``num_workers=2`` held 2,447. An
``OpenShards`` keeps readers holding at most ``limit`` descriptors over all its owners
together, and at most ``keep`` readers of any one owner (a dataset's own rule: 2 local shards,
1 leased cached one); opening one more closes the least recently used first, on the
consumer's thread, before the new one is returned.

A read-ahead run across spans (read/fetcher.py) reads at most ``keep`` distinct shards at
a time, and every reader it still reads was returned after any other; so as long as ``limit``
covers every owner's ``keep`` readers, the LRU never closes a shard the run still reads.

Not thread-safe: one per consumer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from shardkit.read.options import ReadOptions
from shardkit.read.shard_reader import ShardReader
from shardkit.read.stats import ReadStats

# Descriptors held by open shard readers per consumer, over all the sources of a mixture (RP1):
# 128 local shards or 64 cached ones, whatever the number of sources; with a worker's other
# descriptors (~20) well inside `ulimit -n 256`. A mixture's window visits its sources in
# order, once each, so up to this many sources nothing is reopened; with more, each source's
# shard is opened once per window (its index read again, and the block the previous window
# stopped inside decoded again, P21), not once per span.
MAX_SHARD_DESCRIPTORS = 128


class ShardReaders(Protocol):
    """What reads a consumer's windows (read/stream.py ``read_window``, read/fetcher.py):
    readers by shard index; a run uses at most ``keep_open`` distinct shards of one source
    (``source_of``) and ``open_limit`` in all at once (fetcher.py, RP6). ``ShardOpener``
    (one dataset) and ``MixtureOpener`` (global shard indices over sources) are two."""

    @property
    def options(self) -> ReadOptions: ...

    @property
    def stats(self) -> ReadStats: ...

    @property
    def keep_open(self) -> int: ...

    @property
    def open_limit(self) -> int: ...

    def source_of(self, shard_index: int) -> int: ...

    def reader(self, shard_index: int) -> ShardReader: ...


class Closer(Protocol):
    def close(self) -> None: ...


Reader = TypeVar("Reader")


class OpenShards(Generic[Reader]):
    """Readers by ``(owner, shard_index)``, least recently used closed first; ``limit``: the
    descriptors they may hold together."""

    def __init__(self, limit: int = MAX_SHARD_DESCRIPTORS) -> None:
        if limit < 1:
            raise ValueError(f"limit: at least one descriptor, got {limit}")
        self.limit = limit
        self.descriptors = 0  # held by the open readers now
        self._per_owner: dict[Hashable, int] = {}  # open readers of each owner
        self._open: OrderedDict[tuple[Hashable, int], tuple[Reader, Closer, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def get(self, owner: Hashable, shard_index: int) -> Reader | None:
        """The open reader of ``shard_index``, now the most recently used; None if closed."""
        entry = self._open.get((owner, shard_index))
        if entry is None:
            return None
        self._open.move_to_end((owner, shard_index))
        return entry[0]

    def add(self, owner: Hashable, shard_index: int, reader: Reader, closer: Closer,
            keep: int, descriptors: int = 1) -> None:
        """Hold ``reader``, which holds ``descriptors`` (``closer`` closes it and what it holds,
        e.g. a lease), closing the owner's oldest beyond ``keep`` readers and then everyone's
        oldest while more than ``limit`` descriptors are held."""
        if keep * descriptors > self.limit:
            raise ValueError(f"keep: {keep} open shards of {descriptors} descriptor(s) per owner "
                             f"exceeds the limit of {self.limit}")
        self._open[(owner, shard_index)] = (reader, closer, descriptors)
        self.descriptors += descriptors
        self._per_owner[owner] = self._per_owner.get(owner, 0) + 1
        while self._per_owner[owner] > keep:  # the owner's oldest (never the one just added)
            self._close(next(key for key in self._open if key[0] == owner))
        while self.descriptors > self.limit:
            self._close(next(iter(self._open)))

    def close_owner(self, owner: Hashable) -> None:
        """Close every reader of ``owner``, newest first."""
        for key in reversed([key for key in self._open if key[0] == owner]):
            self._close(key)

    def _close(self, key: tuple[Hashable, int]) -> None:
        _, closer, descriptors = self._open.pop(key)
        self.descriptors -= descriptors
        left = self._per_owner.pop(key[0]) - 1
        if left:
            self._per_owner[key[0]] = left
        closer.close()
