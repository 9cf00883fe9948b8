"""The shard readers one consumer holds open: a bounded LRU, closed deterministically (RP1).

A reader holds one descriptor (a local file, a cached entry) and, for a cached entry, its lease
(one more, the flock). A mixture's sources each open their own shards, so without a bound the
descriptors grew with the number of sources: 600 sources at ``num_workers=2`` held 2,447. An
``OpenShards`` keeps at most ``limit`` readers of all its owners together, and at most ``keep``
of any one owner (a dataset's own rule: 2 local shards, 1 leased cached one); opening one more
closes the least recently used first, on the consumer's thread, before the new one is returned.

A read-ahead run across spans (read/spans_ahead.py) reads at most ``keep`` distinct shards at
a time, and every reader it still reads was returned after any other; so as long as ``limit``
is at least every owner's ``keep``, the LRU never closes a shard the run still reads.

Not thread-safe: one per consumer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

# Open shard readers per consumer, over all the sources of a mixture (RP1). Each holds one
# descriptor (two for a leased cached entry), so a DataLoader worker holds at most 2 × 32 for
# shards, whatever the number of sources: well inside `ulimit -n 256`. A mixture's window
# visits its sources in order, once each (specs/mixture.md), so with more sources than this
# each source's shard is opened once per window (its index read again; a cached entry's checked
# index is kept per process, K45), not once per span.
MAX_OPEN_SHARDS = 32


class Closer(Protocol):
    def close(self) -> None: ...


Reader = TypeVar("Reader")


class OpenShards(Generic[Reader]):
    """Readers by ``(owner, shard_index)``, least recently used closed first."""

    def __init__(self, limit: int = MAX_OPEN_SHARDS) -> None:
        if limit < 1:
            raise ValueError(f"limit: at least one open shard, got {limit}")
        self.limit = limit
        self._open: OrderedDict[tuple[Hashable, int], tuple[Reader, Closer]] = OrderedDict()

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
            keep: int) -> None:
        """Hold ``reader`` (``closer`` closes it and what it holds, e.g. a lease), closing the
        owner's oldest beyond ``keep`` and then everyone's oldest beyond ``limit``."""
        if keep > self.limit:
            raise ValueError(f"keep: {keep} open shards per owner exceeds the limit of {self.limit}")
        self._open[(owner, shard_index)] = (reader, closer)
        mine = [key for key in self._open if key[0] == owner]
        for key in mine[:max(0, len(mine) - keep)]:
            self._open.pop(key)[1].close()
        while len(self._open) > self.limit:
            _, (_, old) = self._open.popitem(last=False)
            old.close()

    def close_owner(self, owner: Hashable) -> None:
        """Close every reader of ``owner``, newest first."""
        for key in reversed([key for key in self._open if key[0] == owner]):
            self._open.pop(key)[1].close()
