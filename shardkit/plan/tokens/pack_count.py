"""How many blocks the pack cutter makes of a work, without making them (specs/token-blocks.md
TB3, TB6, TB27). Pure.

TB6 decides a pack level's step count from every consumer's block count ``k_c``, which is the
number of blocks :class:`~shardkit.plan.tokens.blocks.BlockCutter` yields on the consumer's work.
``count_pack_blocks`` replays the same placement — a piece of at least ``seq_len`` positions
gives full blocks of its own (split) or one (truncate); a shorter one goes best-fit (or
first-fit) into at most ``open_blocks`` open blocks, a new one opened while there is room,
else the fullest (oldest) emitted; a block that becomes full is emitted; the open ones count at
the end — on the pieces' lengths as Python ints, with no piece or block objects (best fit: a
sorted list of fills and one binary search per piece), and the same count
(``tests/unit/plan/test_token_pack_count.py``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shardkit.plan.tokens.blocks import BlockCutter, BlockOptions, Piece
from shardkit.plan.tokens.pieces import Pieces


@dataclass(frozen=True)
class CountShare:
    """A pack step count shared among processes (TB29): this process counts the blocks ``k_c`` of
    ``consumers`` only, and ``agree(value, op)`` combines every process's value — the least
    (``op="min"``, drop tail) or most (``"max"``, pad) of its counts — into the one over all
    consumers (an all-reduce in the loader; pure here)."""

    consumers: range
    agree: Callable[[int, str], int]

    def blocks(self, value: int, batch_size: int, tail: str) -> int:
        """TB6's ``K`` from this process's ``value``, agreed with the others."""
        if tail == "drop":
            return self.agree(value, "min") // batch_size * batch_size
        return -(-self.agree(value, "max") // batch_size) * batch_size


def count_pack_blocks(pieces: Sequence[Piece] | Pieces, options: BlockOptions) -> int:
    """The number of blocks ``BlockCutter(pieces, options)`` yields in pack mode."""
    work = Pieces.of(pieces)
    if not work.positive:  # an empty piece opens a block in the cutter: count with it
        cutter, n = BlockCutter(work, options), 0
        while cutter.next_block() is not None:
            n += 1
        return n
    seq_len, limit = options.seq_len, options.open_blocks
    lengths: list[int] = (work.stop - work.start).tolist()
    if options.fit == "best":
        return _best_fit(lengths, seq_len, limit, options.long_docs == "split")
    return _first_fit(lengths, seq_len, limit, options.long_docs == "split")


def _long(length: int, seq_len: int, split: bool) -> tuple[int, int]:
    """Full blocks of one document alone (TB3) and the positions left to pack."""
    if length < seq_len:
        return 0, length
    return divmod(length, seq_len) if split else (1, 0)


def _best_fit(lengths: list[int], seq_len: int, limit: int, split: bool) -> int:
    """Best fit: what decides later blocks is only the multiset of the open blocks' fills (blocks
    of equal fill are interchangeable: the cutter's lowest-index and oldest tie-breaks choose
    among equals), kept sorted, so a placement is one binary search (TB3's long pieces inline:
    this loop is the pack plan's cost, ~0.2 µs a piece)."""
    used: list[int] = []  # fills of the open blocks, ascending
    count = 0
    right, insort = bisect.bisect_right, bisect.insort
    for length in lengths:
        if length >= seq_len:  # full blocks of one document alone (TB3), then what is left to pack
            if not split:
                count += 1
                continue
            full, length = divmod(length, seq_len)
            count += full
            if not length:
                continue
        elif not length:
            continue
        i = right(used, seq_len - length)  # past the fullest open block it fits in
        if i:
            fill = used.pop(i - 1) + length
            if fill == seq_len:
                count += 1
            else:
                insort(used, fill)
            continue
        if len(used) >= limit:  # none fits and all are open: the fullest is emitted
            used.pop()
            count += 1
        insort(used, length)  # the new open block (length < seq_len here)
    return count + len(used)


def _first_fit(lengths: list[int], seq_len: int, limit: int, split: bool) -> int:
    used: list[int] = []  # fills of the open blocks, oldest first
    count = 0
    for length in lengths:
        full, length = _long(length, seq_len, split)
        count += full
        if not length:
            continue
        for i, fill in enumerate(used):
            if fill + length <= seq_len:
                used[i] = fill + length
                if used[i] == seq_len:
                    used.pop(i)
                    count += 1
                break
        else:
            if len(used) >= limit:  # the oldest is emitted
                used.pop(0)
                count += 1
            used.append(length)
    return count + len(used)


def group_bounds(pool: Pieces, num_consumers: int) -> np.ndarray:
    """TB6 pack: consumer ``c`` takes the whole pieces starting in pool positions
    ``[c·P/C, (c+1)·P/C)``; returns the piece index each consumer's group starts at (C+1 values)."""
    starts = pool.ends - (pool.stop - pool.start)
    owner = np.minimum(starts * num_consumers // max(pool.total, 1), num_consumers - 1)  # nondecreasing
    bounds: np.ndarray = np.searchsorted(owner, np.arange(num_consumers + 1), side="left")
    return bounds
