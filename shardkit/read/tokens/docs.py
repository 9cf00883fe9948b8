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

import heapq
from collections.abc import Callable, Container, Generator, Iterator
from typing import Any

import numpy as np

from shardkit.errors import CorruptShardError, FormatError
from shardkit.format.column_parse import Column
from shardkit.plan import Plan
from shardkit.plan.tokens.lengths_source import DocArray
from shardkit.read.column_pieces import ColumnPiece, row_views
from shardkit.read.dataset import StoredDataset
from shardkit.read.options import ReadOptions
from shardkit.read.shard_reader import SampleChunk
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


def with_empty_neighbours(found: list[tuple[int, int]], positions: np.ndarray | DocArray) -> list[tuple[int, int]]:
    """``found`` runs, each widened over the documents with no position just before and after it
    (TB23: their lengths are checked too; the work never names them), and runs that then meet or
    overlap going forward merged into one. ``positions``: per document of the epoch, or of a
    range of it (a ``DocArray`` whose ends are next to documents with positions, TB25)."""
    if isinstance(positions, DocArray):
        base = positions.lo
        local = with_empty_neighbours([(a - base, b - base) for a, b in found], positions.values)
        return [(a + base, b + base) for a, b in local]
    n = len(positions)
    if not found or n == 0:
        return found
    has = np.asarray(positions) > 0
    index = np.arange(n)
    last_before = np.maximum.accumulate(np.where(has, index, -1))  # the last d' <= d with positions
    next_from = np.minimum.accumulate(np.where(has, index, n)[::-1])[::-1]  # the first d' >= d
    out: list[tuple[int, int]] = []
    for lo, hi in found:
        lo = int(last_before[lo - 1]) + 1 if lo > 0 else 0
        hi = int(next_from[hi]) if hi < n else n
        if out and out[-1][0] <= lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def sample_of(order: Plan, d: int) -> int:
    """The global sample index of document ``d`` of the one-consumer ``order``: one seek (P9)."""
    return int(next(order.consumer_windows(0, d)).global_indices(order.shard_offsets)[0])


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
        self.expected: np.ndarray | DocArray | None = None  # tokens per document the plan was made from (TB23)
        self._stream: Iterator[tuple[int, list[np.ndarray], list[np.ndarray] | None]] = iter(())
        self._next_index = self._run_end = 0  # the next document the stream gives; its run's end
        self.loaded: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        self._expiry: list[tuple[int, int]] = []  # (last_use, document) of each loaded document, a heap
        self._held: set[int] = set()  # documents past their last use that an open block still holds
        self.masks = _Masks(self)

    def expect(self, num_tokens: np.ndarray | DocArray, positions: np.ndarray | DocArray) -> None:
        """Check every document read against ``num_tokens`` (per document index: the lengths the
        plan was made from) and read the documents with no ``positions`` next to the ones the work
        needs too (TB23), so a length index that lies is a ``CorruptShardError``, not dropped tokens.
        Call before the first document is read."""
        self.expected = num_tokens if isinstance(num_tokens, DocArray) else np.asarray(num_tokens)
        self._runs = iter(with_empty_neighbours(runs(list(self.last_use)), positions))

    def __getitem__(self, d: int) -> np.ndarray:
        return self._load(d)[0]

    def _load(self, d: int) -> tuple[np.ndarray, np.ndarray | None]:
        while d not in self.loaded:
            if self._next_index >= self._run_end:
                lo, hi = next(self._runs)  # StopIteration here: a document the work never named
                self._stream, self._next_index, self._run_end = self._read_run(lo, hi), lo, hi
            self._pull()
        while self._next_index < self._run_end and self._next_index not in self.last_use:
            self._pull()  # the empty neighbours that follow: checked now (TB23), not kept
        return self.loaded[d]

    def _pull(self) -> None:
        """Read the next chunk of documents of the current run: check their lengths, keep the
        needed ones."""
        item = next(self._stream, None)
        if item is None:  # the epoch ended inside the run
            self._next_index = self._run_end
            return
        first, tokens, masks = item
        n = len(tokens)
        self._next_index = first + n
        if self.expected is not None and n:
            lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
            want = np.asarray(self.expected[np.arange(first, first + n)])
            bad = np.flatnonzero(lengths != want)
            if bad.size:
                at = int(bad[0])
                raise CorruptShardError(f"{self._sample_where(first + at)}: field {self.field!r} holds "
                                        f"{int(lengths[at])} tokens, the plan was made from {int(want[at])} "
                                        f"({self._lengths_from()}); run shardkit verify (TB23)")
        needed = self.last_use
        for i, d in enumerate(range(first, first + n)):  # a neighbour read only for its length is not kept
            if d in needed:
                self.loaded[d] = (tokens[i], None if masks is None else masks[i])
                heapq.heappush(self._expiry, (needed[d], d))

    def _sample_where(self, d: int) -> str:
        """Document ``d`` as the dataset, shard and sample that hold it."""
        offsets = self.order.shard_offsets
        sample = sample_of(self.order, d)
        shard = int(np.searchsorted(offsets, sample, side="right")) - 1
        name = self.dataset.manifest.shards[shard].name
        return f"{self.dataset.url}: document {d} (epoch order) = sample {sample} (shard {name}, " \
               f"sample {sample - int(offsets[shard])})"

    def _lengths_from(self) -> str:
        info = self.dataset.manifest.lengths_of(self.field)
        return "a scan of the shards" if info is None else f"the length index {info.name}"

    def _read_run(self, lo: int, hi: int) -> Iterator[tuple[int, list[np.ndarray], list[np.ndarray] | None]]:
        """Documents ``lo … hi-1`` as chunks ``(first, token arrays, masks)``, one per sample chunk read."""
        d = lo
        windows = self._windows(lo)
        try:
            for window in windows:
                tokens, masks = self._documents(d, window.samples)
                n = min(len(tokens), hi - d)
                yield d, tokens[:n], None if masks is None else masks[:n]
                d += n
                if d == hi:
                    return
        finally:
            windows.close()

    def _windows(self, lo: int) -> Generator[WindowSamples, None, None]:
        """The one-consumer order plan's samples from epoch index ``lo`` on (a mixture's reader
        overrides this)."""
        return iter_consumer(self.dataset, self.order, 0, lo, self.cache, self.stats,  # type: ignore[return-value]
                             self.options)

    def _documents(self, d: int, chunk: SampleChunk) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """The token arrays (and masks) of ``chunk``'s samples, whose first is document ``d``: a
        column block's token column is sliced as views, with no sample dicts (TB12)."""
        if not isinstance(chunk, ColumnPiece):
            samples = list(chunk)
            tokens = [self._checked(d + i, sample.get(self.field)) for i, sample in enumerate(samples)]
            if self.mask_field is None:
                return tokens, None
            return tokens, [np.asarray(sample.get(self.mask_field)).astype(bool) for sample in samples]
        tokens = _column_rows(chunk, self.field, lambda a: self._checked(d, a))
        if self.mask_field is None:
            return tokens, None
        return tokens, _column_rows(chunk, self.mask_field, lambda a: np.asarray(a).astype(bool))

    def _checked(self, d: int, value: Any) -> np.ndarray:
        tokens = np.asarray(value)
        if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
            raise FormatError(f"{self.dataset.url}: document {d} (epoch order): field {self.field!r} must be "
                              f"a 1-D integer array, got {type(value).__name__} {tokens.dtype}")
        return tokens

    def release(self, cursor: int, keep: Callable[[], Container[int]]) -> None:
        """Forget documents no piece from index ``cursor`` on needs, except those in ``keep()``
        (pack mode's open blocks; asked only while one is past its last use): O(log n) per
        document forgotten, plus the documents held for open blocks, whatever is loaded."""
        expiry, held = self._expiry, self._held
        if not held and (not expiry or expiry[0][0] >= cursor):
            return
        keeping = keep()
        while expiry and expiry[0][0] < cursor:
            d = heapq.heappop(expiry)[1]
            if d in keeping:
                held.add(d)  # past its last piece, still in an open block: checked at every release
            else:
                self.loaded.pop(d, None)
        for d in [d for d in held if d not in keeping]:
            held.discard(d)
            self.loaded.pop(d, None)


def _column_rows(chunk: ColumnPiece, name: str, check: Callable[[Any], np.ndarray]) -> list[np.ndarray]:
    """Samples ``chunk.index`` of the array column ``name`` as views of its data (``check``
    sees the whole column, each block's of a joined one, or ``None`` when the block has no
    such column)."""
    column = next((c for c in chunk.columns if c.name == name), None)
    if column is None or (isinstance(column, Column) and column.offsets is None):
        check(None if column is None else column.data)
        raise FormatError(f"column {name!r} is not an array column")  # check refuses it first
    return row_views(column, chunk.index, check)


class _Masks:
    def __init__(self, docs: EpochDocuments) -> None:
        self.docs = docs

    def __getitem__(self, d: int) -> np.ndarray:
        mask = self.docs._load(d)[1]
        if mask is None:
            raise FormatError(f"document {d}: no loss mask field")
        return mask
