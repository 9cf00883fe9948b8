"""Documents of one token-block consumer, read in the order its work needs them
(specs/token-blocks.md TB12).

A consumer's work names documents by their index in the epoch order (the sequence of a
one-consumer sample plan). :class:`EpochDocuments` reads the documents the work needs — each
piece's document, and in concat mode the next document whose first token labels a piece's last
position — as runs of consecutive epoch indices through the ordinary consumer reader (so shard
caching, read-ahead and checksums are the usual ones), keeps each until its last use, and gives
them out by index. Not thread-safe; one per consumer iteration.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import numpy as np

from shardkit.errors import FormatError
from shardkit.plan import Plan
from shardkit.read.column_pieces import as_samples
from shardkit.read.dataset import StoredDataset
from shardkit.read.options import ReadOptions
from shardkit.read.stats import ReadStats
from shardkit.read.stream import WindowSamples, iter_consumer
from shardkit.storage import ShardCache


def runs(wanted: list[int]) -> list[tuple[int, int]]:
    """``wanted`` (epoch indices in need order) as half-open runs of consecutive indices."""
    out: list[tuple[int, int]] = []
    for d in wanted:
        if out and out[-1][1] == d:
            out[-1] = (out[-1][0], d + 1)
        else:
            out.append((d, d + 1))
    return out


class EpochDocuments:
    """``docs[d]`` → the token array of document ``d``; ``docs.masks[d]`` its loss mask.

    ``needs``: ``(document, last_use)`` in the order the work first needs each document
    (``last_use``: the index of the last work piece that needs it, for :meth:`release`)."""

    def __init__(self, dataset: StoredDataset, order: Plan, fields: tuple[str, str | None],
                 needs: list[tuple[int, int]], cache: ShardCache | None = None,
                 stats: ReadStats | None = None, options: ReadOptions = ReadOptions()) -> None:
        self.dataset, self.order, self.options = dataset, order, options
        self.field, self.mask_field = fields
        self.cache, self.stats = cache, stats
        self.last_use = dict(needs)
        self._runs = iter(runs([d for d, _ in needs]))
        self._stream: Iterator[tuple[int, dict[str, Any]]] = iter(())
        self.loaded: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        self.masks = _Masks(self)

    def __getitem__(self, d: int) -> np.ndarray:
        return self._load(d)[0]

    def _load(self, d: int) -> tuple[np.ndarray, np.ndarray | None]:
        while d not in self.loaded:
            item = next(self._stream, None)
            if item is None:
                lo, hi = next(self._runs)  # StopIteration here: a document the work never named
                self._stream = self._read_run(lo, hi)
                continue
            index, sample = item
            self.loaded[index] = self._fields(index, sample)
        return self.loaded[d]

    def _read_run(self, lo: int, hi: int) -> Iterator[tuple[int, dict[str, Any]]]:
        d = lo
        windows = self._windows(lo)
        try:
            for window in windows:
                for sample in as_samples(window.samples):
                    yield d, sample
                    d += 1
                    if d == hi:
                        return
        finally:
            windows.close()

    def _windows(self, lo: int) -> Generator[WindowSamples, None, None]:
        """The one-consumer order plan's samples from epoch index ``lo`` on (a mixture's reader
        overrides this)."""
        return iter_consumer(self.dataset, self.order, 0, lo, self.cache, self.stats,  # type: ignore[return-value]
                             self.options)

    def _fields(self, d: int, sample: dict[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
        tokens = np.asarray(sample.get(self.field))
        if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
            raise FormatError(f"{self.dataset.url}: document {d} (epoch order): field {self.field!r} must be "
                              f"a 1-D integer array, got {type(sample.get(self.field)).__name__} {tokens.dtype}")
        if self.mask_field is None:
            return tokens, None
        return tokens, np.asarray(sample.get(self.mask_field)).astype(bool)

    def release(self, cursor: int, keep: set[int]) -> None:
        """Forget documents no piece from index ``cursor`` on needs, except ``keep`` (pack mode's
        open blocks)."""
        for d in [d for d in self.loaded if self.last_use.get(d, -1) < cursor and d not in keep]:
            del self.loaded[d]


class _Masks:
    def __init__(self, docs: EpochDocuments) -> None:
        self.docs = docs

    def __getitem__(self, d: int) -> np.ndarray:
        mask = self.docs._load(d)[1]
        if mask is None:
            raise FormatError(f"document {d}: no loss mask field")
        return mask
