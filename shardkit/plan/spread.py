"""Read-time spreading: each consumer's range draws small blocks from the whole epoch (P18-P20).

With ``PlanParams.spread = f > 1`` (and ``shuffle``) the level-0 source is a
:class:`StripedSequence`: the epoch sequence cut into blocks of ``b`` samples, ``b`` about a
shard's ``1/f`` (:func:`stripe_block`), dealt to ``C`` columns round-robin (block ``t`` to
column ``t mod C``) and read column after column. Consumers still take contiguous equal-step
ranges of their source (P2, P8), so consumer ``c`` owns about column ``c``: the blocks
``c, c + C, c + 2C, ...`` of the epoch sequence.

Why: a consumer's window then holds ``window / b`` blocks spaced ``C × b`` samples apart, about
``min(f, C)`` times as many shards as a window of one contiguous range (a sorted dataset's
batches see that many more labels), while every shard is still read once per consumer, front to
back, by at most about ``f`` consumers that all reach it at the same point of the epoch (the job
sweeps the epoch sequence together, so a node cache downloads a shard once for all of them).

Pure, immutable, thread-safe; O(consumers) memory, O(log consumers) per seek.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from shardkit.plan.sequence import EpochSequence, SpanSequence
from shardkit.plan.spans import Span

_NO_SHARDS = np.zeros(0, dtype=np.int64)


def stripe_block(shard_sizes: np.ndarray, spread: int, num_consumers: int) -> int:
    """Samples per block (P18): ``ceil(min(median non-empty shard size, N / C) / spread)``, at
    least 1 - the unit a consumer owns without spreading (a shard, or its whole range when that
    is smaller), cut in ``spread``: each shard is read by about ``spread`` times as many
    consumers as without spreading (at most all of them)."""
    sizes = shard_sizes[shard_sizes > 0]
    if len(sizes) == 0:
        return 1
    unit = min(int(np.median(sizes)), int(sizes.sum()) // num_consumers)
    return max(1, -(-unit // spread))


class StripedSequence(SpanSequence):
    """The samples of ``epoch``, blocks of ``block`` dealt to ``columns`` columns, column-major.

    Position ``p`` of column ``j`` (which starts at ``starts[j]``) is epoch position
    ``(r × columns + j) × block + o`` with ``r, o = divmod(p - starts[j], block)``. Only the
    epoch's last block may be shorter; it is the last block of its column.
    """

    def __init__(self, epoch: EpochSequence, block: int, columns: int) -> None:
        self._epoch, self._block, self._columns = epoch, block, columns
        self.chunk = epoch.chunk
        total = len(epoch)
        num_blocks = -(-total // block)
        counts = np.maximum((num_blocks - np.arange(columns, dtype=np.int64) + columns - 1) // columns, 0)
        samples = counts * block
        if num_blocks:
            samples[(num_blocks - 1) % columns] -= num_blocks * block - total  # the short last block
        self._starts = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(samples)])

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def block(self) -> int:
        return self._block

    def epoch_ranges(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """Epoch positions ``lo:hi`` holding positions ``start:stop`` of this sequence, in
        order; touching ranges are merged (so ``columns = 1`` gives one range)."""
        self.check_range(start, stop)
        pending: tuple[int, int] | None = None
        for lo, hi in self._pieces(start, stop):
            if pending is not None and pending[1] == lo:
                pending = (pending[0], hi)
                continue
            if pending is not None:
                yield pending
            pending = (lo, hi)
        if pending is not None:
            yield pending

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        starts, block = self._starts, self._block
        column = int(np.searchsorted(starts, start, side="right")) - 1
        position = start
        while position < stop:
            column_end = int(starts[column + 1])
            if position >= column_end:  # an empty column (fewer blocks than columns)
                column += 1
                continue
            row, within = divmod(position - int(starts[column]), block)
            lo = (row * self._columns + column) * block + within
            size = min(block - within, stop - position, column_end - position)
            yield lo, lo + size
            position += size

    def spans(self, start: int, stop: int) -> list[Span]:
        return [span for lo, hi in self.epoch_ranges(start, stop) for span in self._epoch.spans(lo, hi)]

    def shards(self, start: int, stop: int) -> np.ndarray:
        """Vectorised per column: a consumer's whole range costs O(its blocks), not a Python
        step per block (``shards_of`` for every consumer stays cheap at 1e5 shards)."""
        self.check_range(start, stop)
        starts, block = self._starts, self._block
        first = int(np.searchsorted(starts, start, side="right")) - 1
        last = int(np.searchsorted(starts, stop, side="left"))
        found = [_NO_SHARDS]
        for column in range(max(first, 0), last):
            lo, hi = max(start, int(starts[column])), min(stop, int(starts[column + 1]))
            if lo >= hi:
                continue
            base = int(starts[column])
            rows = np.arange((lo - base) // block, (hi - 1 - base) // block + 1, dtype=np.int64)
            piece_lo = np.maximum(lo, base + rows * block)
            piece_hi = np.minimum(hi, base + (rows + 1) * block)
            epoch_lo = (rows * self._columns + column) * block + (piece_lo - base - rows * block)
            found.append(self._epoch.shards_of_ranges(epoch_lo, epoch_lo + (piece_hi - piece_lo)))
        return np.concatenate(found)


def striped(epoch: EpochSequence, block: int, columns: int) -> SpanSequence:
    """``epoch`` spread over ``columns`` columns, or ``epoch`` itself when that changes nothing."""
    if columns <= 1 or block >= len(epoch):
        return epoch
    return StripedSequence(epoch, block, columns)
