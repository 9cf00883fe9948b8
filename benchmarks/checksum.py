"""Order-independent digest of a set of samples, so that a fast-but-wrong reader can't win.

Each sample contributes ``xxh3_64(payload bytes, seed=id)``; the digest is the count and the
sum of those values mod 2**64. Any lost, duplicated, truncated or mis-labelled sample changes
it; the order samples arrive in does not. Every read run (peers, shardkit, the raw loop)
computes it in its consumer process and compares it with the one ``data.py`` stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xxhash

_MASK = (1 << 64) - 1


class Digest:
    """Running (count, sum of per-sample hashes, payload bytes). Not thread-safe."""

    __slots__ = ("count", "total", "num_bytes")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.num_bytes = 0

    def add(self, sample_id: int, payload: Any) -> None:
        """``payload``: bytes or a C-contiguous buffer (numpy array, memoryview)."""
        view = memoryview(payload)
        self.total = (self.total + xxhash.xxh3_64_intdigest(view, seed=int(sample_id))) & _MASK
        self.count += 1
        self.num_bytes += view.nbytes

    def add_ragged(self, ids: Any, values: np.ndarray, offsets: Any) -> None:
        """A batch stored as one flat ``values`` array cut at ``offsets`` (len = len(ids) + 1)."""
        bounds = np.asarray(offsets).tolist()
        for position, sample_id in enumerate(np.asarray(ids).tolist()):
            self.add(sample_id, values[bounds[position] : bounds[position + 1]])

    def merge(self, other: Digest) -> None:
        self.count += other.count
        self.total = (self.total + other.total) & _MASK
        self.num_bytes += other.num_bytes

    def hexdigest(self) -> str:
        return f"{self.count}:{self.total:016x}"
