"""The epoch stream as an index, not arrays (specs/token-blocks.md TB25-TB26). Pure.

Level 0 of a token plan is the epoch stream: every document's positions in epoch order (TB1,
TB11). An :class:`EpochIndex` answers what a plan asks of it — the stream's totals, which
document holds stream position ``p`` (``locate``), the pieces of a position range (``cut``) and
per-document values over a range of documents (``docs``) — from running totals at *chunk*
boundaries (one per ``chunk`` documents of the epoch order) and one chunk materialised at a
time, so a process holds O(N / chunk) numbers, never O(N).

``windowed`` builds the chunk totals straight from per-shard totals and a
:class:`LengthSource`: the one-consumer epoch order is the shards in seeded order, each
``shuffle_window`` of them permuted in place (specs/partition.md P10), so a chunk of that order
holds the same documents as the same range of the shard-ordered sequence, whatever the
permutation, and its totals are two running totals of the lengths in manifest order. A chunk's
documents come from the order plan's window (its permutation) and ``LengthSource.take``.
``from_arrays`` is the same index over arrays held in memory (a mixture's order, interleave).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shardkit.plan.params import PlanParams
from shardkit.plan.plan import Plan, shard_order
from shardkit.plan.spans import shard_offsets
from shardkit.plan.tokens.blocks import num_positions
from shardkit.plan.tokens.lengths_source import DocArray, LengthSource
from shardkit.plan.tokens.pieces import Pieces

Chunk = tuple[np.ndarray, np.ndarray]  # (global sample index, segment length) per document
_CACHED_CHUNKS = 8
_REMEMBERED = 1 << 14


def segment_lengths(lengths: np.ndarray, extra_tokens: int) -> np.ndarray:
    """Segment length per document: its tokens plus boundary tokens, 0 for an empty one."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.where(lengths > 0, lengths + extra_tokens, 0)


class EpochIndex:
    """Documents ``0 … num_docs-1`` of an epoch, in chunks of ``chunk`` documents.

    ``position_totals[j]`` / ``piece_totals[j]``: positions / documents with positions in
    chunks before ``j`` (``j = 0 … num_chunks``). ``load(j)`` gives chunk ``j``'s documents.
    Deterministic; caches a few chunks; not thread-safe."""

    def __init__(self, num_docs: int, chunk: int, position_totals: np.ndarray, piece_totals: np.ndarray,
                 load: Callable[[int], Chunk], mode: str) -> None:
        self.num_docs, self.chunk, self.mode = int(num_docs), max(int(chunk), 1), mode
        self.position_totals, self.piece_totals = position_totals, piece_totals
        self._load, self._cache = load, {}  # type: ignore[var-annotated]
        self._located: dict[int, tuple[int, int, int]] = {}

    # ---- construction ----------------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, samples: np.ndarray, segments: np.ndarray, mode: str, chunk: int = 8192) -> EpochIndex:
        """The index of documents whose global sample indices and segment lengths are known."""
        positions = num_positions(segments, mode)
        bounds = np.append(np.arange(0, len(samples), chunk, dtype=np.int64), len(samples))
        running = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(positions)])
        has = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(positions > 0)])
        return cls(len(samples), chunk, running[bounds], has[bounds],
                   lambda j: (samples[j * chunk:(j + 1) * chunk], segments[j * chunk:(j + 1) * chunk]), mode)

    @classmethod
    def windowed(cls, shard_sizes: np.ndarray, params: PlanParams, order: Plan, lengths: LengthSource,
                 extra_tokens: int, mode: str) -> EpochIndex:
        """The index of the one-consumer epoch order ``order`` (``params``: its params, with
        ``interleave == 1``) from ``lengths`` alone, O(shards + N / shuffle_window)."""
        sizes = np.asarray(shard_sizes, dtype=np.int64)
        chunk, offsets = params.shuffle_window, shard_offsets(sizes)
        ordered = shard_order(len(sizes), params)
        running = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(sizes[ordered])])
        total = int(running[-1])
        points = np.concatenate([np.arange(0, total, chunk, dtype=np.int64), [total]])
        if len(sizes) == 0:
            return cls(0, chunk, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), _no_chunk, mode)
        at = np.minimum(np.searchsorted(running, points, side="right") - 1, len(sizes) - 1)
        shard = ordered[at]
        inside = offsets[shard] + (points - running[at])  # the manifest position inside that shard
        per_start = lengths.prefix(offsets)
        per_point = lengths.prefix(inside)
        totals = []
        for start, point in zip(per_start, per_point, strict=True):  # tokens, >= 1 token, >= 2 tokens
            before = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(np.diff(start)[ordered])])
            totals.append(before[at] + point - start[shard])
        tokens, nonempty, two = totals
        if mode == "concat":
            positions, pieces = tokens + extra_tokens * nonempty, nonempty
        else:
            positions, pieces = tokens + (extra_tokens - 1) * nonempty, nonempty if extra_tokens else two
        start_of = [int(x) for x in points[:-1]]

        def load(j: int) -> Chunk:
            window = next(order.consumer_windows(0, start_of[j]))
            samples = window.global_indices(offsets)
            return samples, segment_lengths(lengths.take(samples), extra_tokens)

        return cls(total, chunk, positions, pieces, load, mode)

    # ---- totals ------------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        """Positions of the whole stream (``P`` of TB6 at level 0)."""
        return int(self.position_totals[-1])

    @property
    def num_pieces(self) -> int:
        return int(self.piece_totals[-1])

    def __len__(self) -> int:
        return self.num_pieces

    # ---- chunks ------------------------------------------------------------------------------------
    def _chunk(self, j: int) -> Chunk:
        found = self._cache.get(j)
        if found is None:
            if len(self._cache) >= _CACHED_CHUNKS:
                self._cache.pop(next(iter(self._cache)))
            found = self._cache[j] = self._load(j)
        return found

    def docs(self, lo: int, hi: int) -> Chunk:
        """Global sample index and segment length of documents ``lo … hi-1``."""
        lo, hi = max(lo, 0), min(hi, self.num_docs)
        if lo >= hi:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        parts = [self._chunk(j) for j in range(lo // self.chunk, (hi - 1) // self.chunk + 1)]
        base = lo // self.chunk * self.chunk
        samples = np.concatenate([p[0] for p in parts])[lo - base:hi - base]
        segments = np.concatenate([p[1] for p in parts])[lo - base:hi - base]
        return samples, segments

    def doc_arrays(self, lo: int, hi: int) -> tuple[DocArray, DocArray]:
        samples, segments = self.docs(lo, hi)
        return DocArray(lo, samples), DocArray(lo, segments)

    # ---- positions -----------------------------------------------------------------------------------
    def locate(self, position: int) -> tuple[int, int, int]:
        """``(d, offset, rank)``: stream position ``position`` is position ``offset`` of document
        ``d``, the document with positions number ``rank`` (counted from 0). The last
        ``_REMEMBERED`` answers are kept (consumers' work boundaries are asked for twice)."""
        found = self._located.get(position)
        if found is None:
            if len(self._located) >= _REMEMBERED:
                self._located.clear()
            found = self._located[position] = self._locate(position)
        return found

    def _locate(self, position: int) -> tuple[int, int, int]:
        j = int(np.searchsorted(self.position_totals, position, side="right")) - 1
        j = min(j, len(self.position_totals) - 2)
        positions = num_positions(self._chunk(j)[1], self.mode)
        running = np.cumsum(positions)
        i = int(np.searchsorted(running, position - int(self.position_totals[j]), side="right"))
        offset = position - int(self.position_totals[j]) - int(running[i] - positions[i])
        rank = int(self.piece_totals[j]) + int(np.count_nonzero(positions[:i]))
        return j * self.chunk + i, offset, rank

    def piece_start_from(self, position: int) -> int:
        """The first stream position ``>= position`` where a document's positions start (the
        stream's total past the last)."""
        if position >= self.total:
            return self.total
        d, offset, _ = self.locate(position)
        if offset == 0:
            return position
        j, i = divmod(d, self.chunk)
        return position - offset + int(num_positions(self._chunk(j)[1][i:i + 1], self.mode)[0])

    def cut(self, begin: int, end: int) -> Pieces:
        """The pieces of stream positions ``[begin, end)`` (one per document, TB1)."""
        end = min(end, self.total)
        if begin >= end:
            empty = np.zeros(0, dtype=np.int64)
            return Pieces(empty, empty, empty)
        first, first_offset, _ = self.locate(begin)
        last, last_offset, _ = self.locate(end - 1)
        positions = num_positions(self.docs(first, last + 1)[1], self.mode)
        has = np.flatnonzero(positions > 0)
        start, stop = np.zeros(len(has), dtype=np.int64), positions[has].copy()
        start[0], stop[-1] = first_offset, last_offset + 1
        return Pieces(has + first, start, stop)

    def materialize(self) -> Pieces:
        """Every piece of the stream as arrays: O(N), for the paths that need them all (pack
        counts, elastic remainders)."""
        return self.cut(0, self.total)

    def previous_with_positions(self, d: int) -> int:
        """The last document ``<= d`` with positions, or -1."""
        j = d // self.chunk
        positions = num_positions(self._chunk(j)[1], self.mode)[: d - j * self.chunk + 1]
        if np.any(positions > 0):
            return j * self.chunk + int(np.flatnonzero(positions > 0)[-1])
        m = int(np.searchsorted(self.piece_totals, self.piece_totals[j], side="left"))
        return -1 if m == 0 else self.previous_with_positions(m * self.chunk - 1)

    def next_with_positions(self, d: int) -> int:
        """The first document ``>= d`` with positions, or ``num_docs``."""
        if d >= self.num_docs:
            return self.num_docs
        j = d // self.chunk
        positions = num_positions(self._chunk(j)[1], self.mode)[d - j * self.chunk:]
        if np.any(positions > 0):
            return d + int(np.flatnonzero(positions > 0)[0])
        i = int(np.searchsorted(self.piece_totals, self.piece_totals[j + 1], side="right"))
        return self.num_docs if i >= len(self.piece_totals) else self.next_with_positions((i - 1) * self.chunk)


def _no_chunk(j: int) -> Chunk:
    raise IndexError(f"chunk {j} of an empty epoch")
