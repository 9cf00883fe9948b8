"""Each source's untaken samples of a started mixture epoch, without listing them (MX12).

A plan's remainder (unconsumed real samples of every consumer, then the dropped tail; R3) is,
at any resume level, a concatenation of position ranges of its level-0 mixed sequence(s): at
most one per consumer of every level, plus the tail. A range holds, per source, the ranks of
the whole windows inside it (a contiguous run of the source's epoch slice, from the vectorised
interleave prefix) and the samples of the at most two windows it cuts (one window order each).
``U_i``, source ``i``'s untaken samples, lists range after range (remainder order), within a
range its cut-start samples, its run, its cut-end samples, each in stream order: so building
costs O(ranges x sources) plus one window order per cut, and reading a window of ``U_i`` is
reading runs of its stream, as for any epoch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.mixture.sequence import MixedSequence, SourceStream
from shardkit.plan.sequence import SampleSequence
from shardkit.plan.spans import Decoded, Span, join_decoded

Leaf = tuple[MixedSequence, int, int]
START, RUN, END = range(3)  # the parts of a range, in U_i's order


class Remainder:
    """``rest`` (a plan's remainder) as level-0 ranges ``leaves``; ``counts[k, part, i]``: the
    samples of source ``i`` in part ``part`` of range ``k``; ``run_first[k, i]``: the rank its
    run starts at (sources numbered as in the epoch's plan; those the epoch lacks count 0)."""

    def __init__(self, rest: SampleSequence, num_sources: int) -> None:
        leaves: list[Leaf] = []
        for sequence, lo, hi in rest.leaves(0, len(rest)):
            if not isinstance(sequence, MixedSequence):
                raise PlanError(f"a mixture remainder reads a {type(sequence).__name__}, not a mixed sequence")
            if hi > lo:
                leaves.append((sequence, lo, hi))
        self.leaves = tuple(leaves)
        self.counts = np.zeros((len(leaves), 3, num_sources), dtype=np.int64)
        self.run_first = np.zeros((len(leaves), num_sources), dtype=np.int64)
        self.marks = np.zeros((len(leaves), 4), dtype=np.int64)  # lo, run start, run end, hi
        self.at = np.zeros((len(leaves), 7, num_sources), dtype=np.int64)  # prefixes at marks and cut windows
        # the cuts a window of the remix reads, shared by the sources' streams (thread-safe)
        self._cut_outputs = functools.lru_cache(maxsize=256)(self._outputs_of)
        groups: dict[int, list[int]] = {}
        for k, (sequence, _, _) in enumerate(leaves):
            groups.setdefault(id(sequence), []).append(k)
        for rows in groups.values():
            self._count(leaves[rows[0]][0], np.array(rows, dtype=np.int64))

    def _count(self, sequence: MixedSequence, rows: np.ndarray) -> None:
        lo = np.array([self.leaves[k][1] for k in rows], dtype=np.int64)
        hi = np.array([self.leaves[k][2] for k in rows], dtype=np.int64)
        win, total, n = sequence.window, len(sequence), len(sequence.streams)
        whole = not sequence.shuffled  # ranks rise with positions
        run_lo = lo if whole else np.minimum(-(-lo // win) * win, hi)
        run_hi = hi if whole else np.where(hi == total, hi, np.maximum(hi // win * win, run_lo))
        # the start cut's window lo // win ... (+ 1), the end cut's window run_hi ... ceil(hi / win)
        outer = np.stack([lo // win * win, np.minimum((lo // win + 1) * win, total),
                          np.minimum(-(-hi // win) * win, total)], axis=1)
        marks = np.stack([lo, run_lo, run_hi, hi], axis=1)
        at = sequence.prefixes(np.concatenate([marks, outer], axis=1).reshape(-1)).reshape(len(rows), 7, n)
        self.at[rows, :, :n] = at
        self.marks[rows] = marks
        self.run_first[rows, :n] = at[:, 1]
        self.counts[rows, :, :n] = np.diff(at[:, :4], axis=1)  # exact for the run; cuts fixed below
        cuts = [(r, part) for r in range(len(rows)) for part in (START, END)
                if marks[r, part + 1] > marks[r, part] and not sequence.ranks_exact(*marks[r, part:part + 2].tolist())]
        if not cuts:
            return
        r, part = np.array(cuts, dtype=np.int64).reshape(-1, 2).T
        a, b = marks[r, part], marks[r, part + 1]
        windows = a // win
        bounds = sequence.prefixes(np.concatenate([windows * win, np.minimum((windows + 1) * win, total)]))
        _, where, shared = np.unique(windows, return_inverse=True, return_counts=True)
        alone = shared[where] == 1  # a window of one cut: random counts it without an order
        first, last = bounds[:len(cuts)], bounds[len(cuts):]
        self.counts[rows[r[alone]], part[alone], :n] = sequence.cut_counts(a[alone], b[alone],
                                                                          (first[alone], last[alone]))
        ranks: tuple[int, np.ndarray] | None = None
        for j in np.flatnonzero(~alone).tolist():  # windows of several cuts: one order each
            window = int(windows[j])
            if ranks is None or ranks[0] != window:
                ranks = (window, sequence.window_ranks(window, (first[j], last[j]))[0])
            cut = ranks[1][int(a[j]) - window * win:int(b[j]) - window * win]
            self.counts[rows[r[j]], part[j], :n] = np.bincount(cut, minlength=n)

    def cut_ranks(self, k: int, part: int, source: int) -> np.ndarray:
        """The ranks (sorted) of ``source`` in cut ``part`` of range ``k``."""
        sequence = self.leaves[k][0]
        lo, hi = self.marks[k, part:part + 2].tolist()
        if sequence.ranks_exact(lo, hi):  # no window order needed
            at = self.at[k, :, source]
            return sequence.exact_cut_ranks(lo, hi, source, at[[4, 5, 0, 1]] if part == START else at[[2, 6, 2, 3]])
        labels, ranks = self._cut_outputs(k, part)
        mine: np.ndarray = ranks[labels == source]
        return mine

    def _outputs_of(self, k: int, part: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.marks[k, part:part + 2].tolist()
        edges = (self.at[k, 4], self.at[k, 5]) if part == START else (self.at[k, 2], self.at[k, 6])
        n = len(self.leaves[k][0].streams)
        return self.leaves[k][0].cut_outputs(lo, hi, (edges[0][:n], edges[1][:n]))

    @property
    def totals(self) -> np.ndarray:
        """``|U_i|`` per source."""
        totals: np.ndarray = self.counts.sum(axis=(0, 1))
        return totals


class UntakenStream(SourceStream):
    """Ranks ``0:|U_i|`` are source ``i``'s untaken samples (module doc); later ranks continue
    ``rest`` (its stream after the epoch). Thread-safe."""

    def __init__(self, remainder: Remainder, source: int, rest: SourceStream) -> None:  # noqa: D107
        counts = remainder.counts[:, :, source].reshape(-1)
        self._parts = np.flatnonzero(counts)  # k * 3 + part, in U_i's order
        self._cum = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts[self._parts])])
        self._remainder, self._source, self._rest = remainder, source, rest

    def __len__(self) -> int:
        return int(self._cum[-1])

    def spans(self, lo: int, hi: int) -> list[Span]:
        return self.decode(lo, hi)[0]

    def decode(self, lo: int, hi: int) -> Decoded:
        """As :meth:`SourceStream.decode`: each run of old ranks (or of the rest) decoded by its
        own stream, so a weighted source (MX17) keeps its index and copy numbers."""
        n = len(self)
        pieces = list(self._untaken(min(lo, n), min(hi, n)))
        a, b = max(lo - n, 0), max(hi - n, 0)
        if b > a:
            pieces.append((self._rest, a, b))
        return join_decoded([stream.decode(x, y) for stream, x, y in pieces], [y - x for _, x, y in pieces])

    def shards(self, lo: int, hi: int) -> np.ndarray:
        return np.array([span.shard_index for span in self.spans(lo, hi)], dtype=np.int64)

    def _untaken(self, lo: int, hi: int) -> Iterator[tuple[SourceStream, int, int]]:
        """Untaken ranks ``lo:hi`` as ``(old stream, first rank, end rank)`` runs."""
        j = int(np.searchsorted(self._cum, lo, side="right")) - 1
        while lo < hi:
            top = min(hi, int(self._cum[j + 1]))
            k, part = divmod(int(self._parts[j]), 3)
            a, b = lo - int(self._cum[j]), top - int(self._cum[j])
            stream = self._remainder.leaves[k][0].streams[self._source]
            if part == RUN:
                first = int(self._remainder.run_first[k, self._source])
                yield stream, first + a, first + b
            else:
                ranks = self._remainder.cut_ranks(k, part, self._source)[a:b]
                for x, y in _rank_runs(ranks):
                    yield stream, x, y
            lo, j = top, j + 1


def _rank_runs(ranks: np.ndarray) -> Iterator[tuple[int, int]]:
    """Sorted ranks as ``(lo, hi)`` runs of consecutive ones."""
    cut = np.flatnonzero(np.diff(ranks) != 1) + 1
    for a, b in zip(np.r_[0, cut], np.r_[cut, len(ranks)], strict=True):
        if b > a:
            yield int(ranks[a]), int(ranks[b - 1]) + 1
