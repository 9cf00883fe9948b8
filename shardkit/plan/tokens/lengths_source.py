"""Where a token plan gets per-sample lengths from (specs/token-blocks.md TB6, TB25). Pure.

A plan needs, per sample of the token field (manifest order), its token count — but at a
billion samples it must not hold them all. A :class:`LengthSource` answers the two questions a
plan asks: running totals at a few manifest positions (``prefix``: tokens, samples with at least
one token, samples with at least two — what positions and pieces are in either mode, TB1, TB3)
and the lengths of a few samples (``take``). :class:`ArrayLengths` wraps the in-memory lengths
a dataset reads today (its length index, M10-M13); :class:`PeriodicLengths` is a synthetic one
(``table[i % len(table)]``) whose totals are closed-form, for scale tests and benchmarks.

:class:`DocArray` is a per-document array over a window of document indices ``lo … hi-1``
(epoch order), indexed by the *global* document index: what a consumer holds instead of an
array over the whole epoch.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class LengthSource(Protocol):
    num_samples: int

    def prefix(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """At each manifest position ``g`` (0 … num_samples): tokens of samples ``0 … g-1``,
        and how many of them have at least 1 and at least 2 tokens (int64 arrays)."""

    def take(self, samples: np.ndarray) -> np.ndarray:
        """The token counts of the given samples (manifest indices), int64."""


class ArrayLengths:
    """A :class:`LengthSource` over lengths held in memory (what ``document_lengths`` reads)."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = np.asarray(lengths)
        self.num_samples = len(self.lengths)

    def prefix(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        points = np.asarray(points, dtype=np.int64)
        out = []
        for values in (self.lengths, self.lengths >= 1, self.lengths >= 2):
            cum = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(values, dtype=np.int64)])
            out.append(cum[points])
            del cum  # one running total at a time: 8 bytes per sample, transient
        return out[0], out[1], out[2]

    def take(self, samples: np.ndarray) -> np.ndarray:
        return self.lengths[np.asarray(samples, dtype=np.int64)].astype(np.int64)


class PeriodicLengths:
    """Synthetic lengths: sample ``i`` has ``table[i % len(table)]`` tokens. Totals at any
    position are closed-form, so a plan over 10**9 samples needs no per-sample array."""

    def __init__(self, num_samples: int, table: np.ndarray) -> None:
        self.num_samples = int(num_samples)
        self.table = np.asarray(table, dtype=np.int64)
        self._cums = [np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(v, dtype=np.int64)])
                      for v in (self.table, self.table >= 1, self.table >= 2)]

    def prefix(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        full, part = np.divmod(np.asarray(points, dtype=np.int64), len(self.table))
        a, b, c = (full * cum[-1] + cum[part] for cum in self._cums)
        return a, b, c

    def take(self, samples: np.ndarray) -> np.ndarray:
        return self.table[np.asarray(samples, dtype=np.int64) % len(self.table)]


class DocArray:
    """``values[d - lo]`` for documents ``lo … lo + len(values) - 1``, indexed by document index
    (an int or an int array). ``get(docs, fill)`` gives ``fill`` where ``docs < 0``."""

    __slots__ = ("hi", "lo", "values")

    def __init__(self, lo: int, values: np.ndarray) -> None:
        self.lo, self.values = int(lo), values
        self.hi = self.lo + len(values)  # values is never replaced: map() makes another array

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, d: Any) -> Any:
        if d.__class__ is int or isinstance(d, np.integer):  # the per-segment path: one document
            at = int(d) - self.lo
            if not 0 <= at < self.hi - self.lo:
                raise IndexError(f"document {int(d)} outside this consumer's documents {self.lo}…{self.hi - 1}")
            return self.values[at]
        docs = np.asarray(d)
        if docs.size and (int(docs.min()) < self.lo or int(docs.max()) >= self.hi):
            raise IndexError(f"documents {int(docs.min())}…{int(docs.max())} outside this consumer's documents "
                             f"{self.lo}…{self.hi - 1}")
        return self.values[docs - self.lo]

    def get(self, docs: np.ndarray, fill: int) -> np.ndarray:
        real = docs >= 0
        return np.where(real, self.values[np.where(real, docs - self.lo, 0)], fill)

    def map(self, values: np.ndarray) -> DocArray:
        """Another array over the same documents."""
        return DocArray(self.lo, values)
