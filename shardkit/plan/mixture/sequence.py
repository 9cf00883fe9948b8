"""The mixed epoch sequence: sources interleaved lazily, exact counts (specs/mixture.md).

A :class:`MixedSequence` is a :class:`SampleSequence` like the epoch sequence of one dataset, so
the partition, equal steps, pads, seeks and elastic resume of ``shardkit.plan`` apply to it
unchanged. Shard indices in its spans are *global*: the sources' shards concatenated in source
order (source ``i``'s local shard ``s`` is ``shard_base[i] + s``).

Position -> source follows the merged order of the keys ``(2r + 1) / (2 q_i)`` (the ``r``-th
sample of source ``i``, ``q_i`` its epoch count; ties to the lower source): a smooth, exact,
seekable interleave (MX3). Window ``j`` (positions ``j*win ... (j+1)*win``) decodes each source's
contiguous run of stream positions and outputs them permuted (``random``) or in merged slots
with each source's samples permuted (``stratified``). Immutable and thread-safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from shardkit.plan.mixture.cuts import first_counts
from shardkit.plan.mixture.prefix import Interleave
from shardkit.plan.rng import (
    first_of_permutation,
    permutation,
    philox_key,
    philox_keys,
    raw_stream,
    stable_argsort,
)
from shardkit.plan.sequence import EpochSequence, SampleSequence, window_bounds
from shardkit.plan.spans import Decoded, Span, Window, join_decoded

if TYPE_CHECKING:
    from shardkit.plan.mixture.spec import MixSource

SALT_MIX_ORDER = 11  # a source's shard order: (11, seed, name word)
SALT_MIX_WINDOW = 12  # window j's permutation: (12, seed, epoch, j[, source])
_NO_SHARDS = np.zeros(0, dtype=np.int64)


def name_word(name: str) -> int:
    """A stable integer for a source name (RNG key word; survives adding/removing sources)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


class SourceStream:
    """Source ``i``'s epoch slice of its stream: ranks ``0..count`` are stream positions
    ``cursor + rank``, stream position ``s`` being sample ``s mod N`` of the fixed shard order
    (passes repeat that order, MX2). ``epoch_cursor`` (default ``cursor``): the source's cursor
    at the start of the epoch; position ``s`` is copy ``(s - epoch_cursor) // N`` of its sample
    (the times the epoch took it before, MX2), so a repeat draws other augmentations (SW8)."""

    def __init__(self, sizes: np.ndarray, order: np.ndarray, shard_base: int, cursor: int,
                 epoch_cursor: int | None = None) -> None:
        self._pass = EpochSequence(sizes, order, chunk=1)
        self._base, self._cursor = shard_base, cursor
        self._lead = cursor - (cursor if epoch_cursor is None else epoch_cursor)  # cursor - epoch cursor

    @property
    def num_samples(self) -> int:
        return len(self._pass)

    def _pieces(self, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        n = self.num_samples
        start, stop = self._cursor + lo, self._cursor + hi
        while start < stop:
            inner = start % n
            take = min(stop - start, n - inner)
            yield inner, inner + take
            start += take

    def spans(self, lo: int, hi: int) -> list[Span]:
        if lo < hi and (inner := (self._cursor + lo) % self.num_samples) + (hi - lo) <= self.num_samples:
            return self._pass.spans(inner, inner + hi - lo, self._base)  # within one pass: the common case
        return [span for a, b in self._pieces(lo, hi) for span in self._pass.spans(a, b, self._base)]

    def shards(self, lo: int, hi: int) -> np.ndarray:
        found = [self._pass.shards(a, b) + self._base for a, b in self._pieces(lo, hi)]
        return np.concatenate(found) if found else _NO_SHARDS

    def copies(self, lo: int, hi: int) -> np.ndarray | None:
        """Ranks ``lo:hi``'s copy numbers (class doc); ``None`` while all are 0 (the first time
        the epoch takes each, as for every source no smaller than its share)."""
        n = self.num_samples
        if hi <= lo or self._lead + hi <= n:
            return None
        found: np.ndarray = (np.arange(self._lead + lo, self._lead + hi, dtype=np.int64)) // n
        return found

    def decode(self, lo: int, hi: int) -> Decoded:
        """Ranks ``lo:hi`` as spans, and per rank its index into the spans' samples and its copy
        number; ``None`` for the index: one sample per rank, in span order (unweighted), for
        the copies: all 0."""
        return self.spans(lo, hi), None, self.copies(lo, hi)


class MixedSequence(SampleSequence):
    """``sum(counts)`` positions interleaving the sources' epoch slices (see module doc).

    ``key = (seed, epoch)`` (``(seed, epoch, -k)`` for segment ``k`` of an epoch, MX11)
    shuffles; ``None`` keeps the merged order and each source's stream order. ``stratified``
    rounds ``window`` up to a multiple of ``batch`` so each batch of a level-0 consumer is one
    block of merged slots.
    """

    def __init__(self, streams: Sequence[SourceStream], counts: Sequence[int], composition: str,
                 window: int, batch: int, key: tuple[int, ...] | None) -> None:
        self._streams = tuple(streams)
        self._mix = Interleave(counts)
        self._stratified = composition == "stratified"
        self._batch = batch
        self._window = -(-window // batch) * batch if self._stratified else window
        self._key = key
        self._last: tuple[int, tuple[Span, ...], np.ndarray, np.ndarray | None] | None = None  # latest window

    def __len__(self) -> int:
        return self._mix.total

    def prefix(self, position: int) -> list[int]:
        """Samples of each source among mixed positions ``0:position``."""
        return self._mix.prefix(position)

    @property
    def window(self) -> int:
        """Positions per window (the last may be shorter)."""
        return self._window

    @property
    def streams(self) -> tuple[SourceStream, ...]:
        return self._streams

    @property
    def shuffled(self) -> bool:
        return self._key is not None

    def prefixes(self, positions: np.ndarray) -> np.ndarray:
        """:meth:`prefix` of many positions at once, shape ``(len(positions), sources)``."""
        return self._mix.prefixes(positions)

    def ranks_exact(self, lo: int, hi: int) -> bool:
        """Whether positions ``lo:hi`` hold exactly the interleave's ranks between them, per
        source (unshuffled, or ``stratified`` cut at batch blocks: MX4)."""
        if self._key is None:
            return True
        return self._stratified and lo % self._batch == 0 and (hi % self._batch == 0 or hi == len(self))

    def window_ranks(self, index: int, bounds: tuple[np.ndarray, np.ndarray] | None = None,
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Window ``index``'s outputs as (source, rank in that source's epoch slice) arrays;
        ``bounds``: the window's prefixes, if known. O(window log window)."""
        w_lo = index * self._window
        if bounds is None:
            at = self._mix.prefixes(np.array([w_lo, min(w_lo + self._window, len(self))]))
            bounds = (at[0], at[1])
        first, last = bounds
        bases = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(last - first)])
        decoded = self._order(index, first.tolist(), last.tolist())
        source = np.searchsorted(bases, decoded, side="right") - 1
        return source, first[source] + decoded - bases[source]

    def exact_cut_ranks(self, lo: int, hi: int, source: int, at: np.ndarray | None = None) -> np.ndarray:
        """The ranks (sorted) of ``source`` among outputs ``lo:hi`` inside one window, when
        :meth:`ranks_exact`: O(its samples in the window), no window order; ``at``: its prefix
        at the window's start and end, ``lo`` and ``hi``, if known."""
        if at is None:
            w_lo = lo // self._window * self._window
            at = self._mix.prefixes(np.array([w_lo, min(w_lo + self._window, len(self)), lo, hi]))[:, source]
        if self._key is None:
            return np.arange(at[2], at[3], dtype=np.int64)
        within = _zero_based_perm(self._key, lo // self._window, source, int(at[1] - at[0]))
        found: np.ndarray = at[0] + np.sort(within[at[2] - at[0]:at[3] - at[0]])
        return found

    def cut_outputs(self, lo: int, hi: int, bounds: tuple[np.ndarray, np.ndarray] | None = None,
                    ) -> tuple[np.ndarray, np.ndarray]:
        """(source, rank) of the outputs ``lo:hi`` inside one window, in decode order (so each
        source's ranks ascend); ``bounds``: the window's prefixes, if known. O(window log
        window), ``random`` O(window): one partition of the window's Philox stream, no sort."""
        index = lo // self._window
        w_lo = index * self._window
        if bounds is None:
            at = self._mix.prefixes(np.array([w_lo, min(w_lo + self._window, len(self))]))
            bounds = (at[0], at[1])
        if self._stratified or self._key is None:
            source, rank = self.window_ranks(index, bounds)
            source, rank = source[lo - w_lo:hi - w_lo], rank[lo - w_lo:hi - w_lo]
            keep = np.lexsort((rank, source))
            return source[keep], rank[keep]
        first, last = bounds
        raw = raw_stream(philox_key(SALT_MIX_WINDOW, *self._key, index), int((last - first).sum()))
        picked = np.flatnonzero(first_of_permutation(raw, hi - w_lo) & ~first_of_permutation(raw, lo - w_lo))
        bases = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(last - first)])
        source = np.searchsorted(bases, picked, side="right") - 1
        return source, first[source] + picked - bases[source]

    def cut_counts(self, lo: np.ndarray, hi: np.ndarray, bounds: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Row ``j``: per source, its outputs among ``lo[j]:hi[j]`` (inside one window, each in
        another; ``bounds``: their windows' prefixes, a row each): the sources of
        :meth:`cut_outputs`, counted. ``random``: each window's Philox stream and a few passes
        over it, no order and no list (cuts.py)."""
        if self._stratified or self._key is None:
            n = len(self._streams)
            return np.array([np.bincount(self.cut_outputs(a, b, (f, g))[0], minlength=n) for a, b, f, g
                             in zip(lo.tolist(), hi.tolist(), *bounds, strict=True)], dtype=np.int64).reshape(-1, n)
        w_lo = lo // self._window * self._window
        keys = [philox_key(SALT_MIX_WINDOW, *self._key, j) for j in (lo // self._window).tolist()]
        sizes = bounds[1] - bounds[0]
        found: np.ndarray = first_counts(keys, sizes, hi - w_lo) - first_counts(keys, sizes, lo - w_lo)
        return found

    def windows(self, start: int, stop: int) -> Iterator[Window]:
        self.check_range(start, stop)
        if start == stop:
            return
        first = start // self._window
        lo = self._mix.prefix(first * self._window)
        for index in range(first, (stop - 1) // self._window + 1):
            w_lo = index * self._window
            w_hi = min(w_lo + self._window, len(self))
            hi = self._mix.prefix(w_hi)
            spans, order, copies = self._window_of(index, lo, hi)
            kept = slice(max(start, w_lo) - w_lo, min(stop, w_hi) - w_lo)
            yield Window(spans, order[kept], None if copies is None else copies[kept])
            lo = hi

    def _window_of(self, index: int, lo: list[int], hi: list[int],
                   ) -> tuple[tuple[Span, ...], np.ndarray, np.ndarray | None]:
        """Window ``index``'s spans, order and copy numbers (``None``: all 0); the latest one is
        kept, because the consumers that split a window (and a remainder's pieces, MX12) ask for
        it in turn. A weighted source (MX17) decodes each of its samples once, however many
        copies: its ranks map to the decoded samples through an index. A source's repeats in
        later passes have copy numbers > 0 (MX2, MX17)."""
        last = self._last  # one tuple read, one tuple write: safe across threads
        if last is not None and last[0] == index:
            return last[1], last[2], last[3]
        parts = [s.decode(a, b) for s, a, b in zip(self._streams, lo, hi, strict=True)]
        listed, where, copies = join_decoded(parts, [b - a for a, b in zip(lo, hi, strict=True)])
        spans = tuple(listed)
        order = self._order(index, lo, hi)
        if copies is not None:  # per rank: to outputs before the ranks become sample indices
            copies = copies[order]
            copies.flags.writeable = False
        if where is not None:
            order = where[order]
        order.flags.writeable = False
        self._last = (index, spans, order, copies)
        return spans, order, copies

    def _order(self, index: int, lo: list[int], hi: list[int]) -> np.ndarray:
        sizes = np.array(hi, dtype=np.int64) - np.array(lo, dtype=np.int64)
        total = int(sizes.sum())
        if self._key is not None and not self._stratified:
            return permutation(philox_key(SALT_MIX_WINDOW, *self._key, index), total)
        merged = self._mix.merged(lo, hi)
        if self._key is None:
            return merged
        # stratified: keep the merged slots, permute each source's samples inside the window,
        # then shuffle the slots of each batch among themselves.
        bases = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(sizes)])
        within = _within_perms(self._key, index, sizes)
        source = np.repeat(np.arange(len(sizes)), sizes)[merged]
        order = bases[source] + within[merged]
        raw = raw_stream(philox_key(SALT_MIX_WINDOW, *self._key, index, -1), total)
        result: np.ndarray = order[_sorted_within_blocks(raw, self._batch)]
        return result

    def shards(self, start: int, stop: int) -> np.ndarray:
        """Shards of the windows touching ``start:stop``, sources interleaved by first use."""
        self.check_range(start, stop)
        if start == stop:
            return _NO_SHARDS
        w_lo, w_hi = window_bounds(start, stop, self._window, len(self))
        lo, hi = self._mix.prefix(w_lo), self._mix.prefix(w_hi)
        found, when = [], []
        for stream, q, a, b in zip(self._streams, self._mix.counts, lo, hi, strict=True):
            rank = a
            for span in stream.spans(a, b):
                found.append(span.shard_index)
                when.append(rank / q)
                rank += span.num_samples
        order = np.argsort(np.array(when), kind="stable")
        return np.array(found, dtype=np.int64)[order] if found else _NO_SHARDS


def _sorted_within_blocks(keys: np.ndarray, block: int) -> np.ndarray:
    """``np.lexsort((keys, arange(len(keys)) // block))``: each run of ``block`` positions sorted
    by its keys (stable), the runs in place; one row-wise argsort, a few times faster per window."""
    whole = len(keys) // block * block
    rows = stable_argsort(keys[:whole].reshape(-1, block))
    rows += np.arange(0, whole, block, dtype=np.int64)[:, None]
    tail = whole + stable_argsort(keys[whole:])
    return np.concatenate([rows.reshape(-1), tail]).astype(np.int64, copy=False)


def _within_perms(key: tuple[int, ...], index: int, sizes: np.ndarray) -> np.ndarray:
    """``_zero_based_perm(key, index, i, sizes[i])`` of every source ``i``, one after another.
    While the sizes are about even (a stratified window), one row-wise argsort of the sources'
    Philox streams padded with the largest key, which a stable sort puts after every real one:
    the first ``sizes[i]`` of row ``i`` are its stream's argsort, as alone."""
    width, total = int(sizes.max(initial=0)), int(sizes.sum())
    if width <= 1 or len(sizes) * width > 2 * total + 64:
        return np.concatenate([np.zeros(0, dtype=np.int64)] + [_zero_based_perm(key, index, i, int(m))
                                                                for i, m in enumerate(sizes.tolist())])
    raws = np.full((len(sizes), width), np.iinfo(np.uint64).max, dtype=np.uint64)
    for i, (m, word) in enumerate(zip(sizes.tolist(), philox_keys((SALT_MIX_WINDOW, *key, index), range(len(sizes))),
                                      strict=True)):
        if m > 1:
            raws[i, :m] = raw_stream(word, m)
    rows = stable_argsort(raws, sizes)
    found: np.ndarray = rows[np.arange(width) < sizes[:, None]].astype(np.int64, copy=False)
    return found


def _zero_based_perm(key: tuple[int, ...], index: int, source: int, length: int) -> np.ndarray:
    if length <= 1:
        return np.zeros(length, dtype=np.int64)
    return permutation(philox_key(SALT_MIX_WINDOW, *key, index, source), length)


def shard_bases_of(sources: Sequence[MixSource]) -> np.ndarray:
    counts = [len(source.shard_sizes) for source in sources]
    return np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts, dtype=np.int64)])


def source_order(source: MixSource, seed: int, shuffle: bool) -> np.ndarray:
    """The fixed shard order a source's passes walk (MX2); manifest order without shuffle."""
    if not shuffle:
        return np.arange(len(source.shard_sizes), dtype=np.int64)
    return permutation(philox_key(SALT_MIX_ORDER, seed, name_word(source.name)), len(source.shard_sizes))
