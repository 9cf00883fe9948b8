"""Samples by global index (manifest order), read through range reads.

``RandomAccess.sample(i)`` finds the shard holding sample ``i`` from the manifest's shard sizes,
opens it (one range read of its index footer, kept for the next lookups in that shard), and
reads only the block holding the sample (checked and decompressed as in streaming). Nothing is
downloaded whole, locally or from object storage. Not thread-safe: one per thread or process.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any

import numpy as np

from shardkit.read.dataset import StoredDataset
from shardkit.read.shard_reader import ShardReader

MAX_OPEN_SHARDS = 8  # readers kept open (each holds its shard's index: a few KB per block)


class RandomAccess:
    """``dataset``'s samples by global index, with the last ``max_open`` shards kept open."""

    def __init__(self, dataset: StoredDataset, max_open: int = MAX_OPEN_SHARDS) -> None:
        self.dataset = dataset
        self.max_open = max_open
        self.starts = np.concatenate([[0], np.cumsum(dataset.manifest.shard_sizes, dtype=np.int64)])
        self._readers: OrderedDict[int, ShardReader] = OrderedDict()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def locate(self, index: Any) -> tuple[int, int]:
        """(shard, sample within it) of global ``index``; negative counts from the end."""
        try:
            position = operator.index(index)
        except TypeError:
            raise TypeError(f"{self.dataset.url}: sample index must be an int, got {index!r}") from None
        total = len(self)
        if position < 0:
            position += total
        if not 0 <= position < total:
            raise IndexError(f"{self.dataset.url}: sample {index} out of range [0, {total})")
        shard = int(np.searchsorted(self.starts, position, side="right")) - 1
        return shard, position - int(self.starts[shard])

    def sample(self, index: Any) -> dict[str, Any]:
        """The decoded sample at global ``index`` (fields as stored; no transform)."""
        shard, local = self.locate(index)
        return self._reader(shard)[local]

    def _reader(self, shard: int) -> ShardReader:
        reader = self._readers.get(shard)
        if reader is not None:
            self._readers.move_to_end(shard)
            return reader
        reader = self.dataset.open_shard(shard)
        self._readers[shard] = reader
        while len(self._readers) > self.max_open:
            _, oldest = self._readers.popitem(last=False)
            oldest.close()
        return reader

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
