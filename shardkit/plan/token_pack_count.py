"""How many blocks the pack cutter makes of a work, without making them (specs/token-blocks.md
TB3, TB6, TB27). Pure.

TB6 decides a pack level's step count from every consumer's block count ``k_c``, which is the
number of blocks :class:`~shardkit.plan.token_blocks.BlockCutter` yields on the consumer's work.
``count_pack_blocks`` replays the same placement — a piece of at least ``seq_len`` positions
gives full blocks of its own (split) or one (truncate); a shorter one goes best-fit (or
first-fit) into at most ``open_blocks`` open blocks, a new one opened while there is room,
else the fullest (oldest) emitted; a block that becomes full is emitted; the open ones count at
the end — on the pieces' lengths as Python ints, with no piece or block objects: ~20× the
cutter's speed, and the same count (``tests/unit/plan/test_token_pack_count.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardkit.plan.token_blocks import BlockCutter, BlockOptions, Piece
from shardkit.plan.token_pieces import Pieces


def count_pack_blocks(pieces: Sequence[Piece] | Pieces, options: BlockOptions) -> int:
    """The number of blocks ``BlockCutter(pieces, options)`` yields in pack mode."""
    work = Pieces.of(pieces)
    if not work.positive:  # an empty piece opens a block in the cutter: count with it
        cutter, n = BlockCutter(work, options), 0
        while cutter.next_block() is not None:
            n += 1
        return n
    seq_len, limit = options.seq_len, options.open_blocks
    best_fit, split = options.fit == "best", options.long_docs == "split"
    used: list[int] = []  # positions in each open block, oldest first
    count = 0
    for length in (work.stop - work.start).tolist():
        if length >= seq_len:  # full blocks of this document alone (TB3)
            if split:
                full, length = divmod(length, seq_len)
                count += full
            else:
                count, length = count + 1, 0
        while length:
            target, room_of_target = -1, seq_len + 1
            for i, u in enumerate(used):
                room = seq_len - u
                if length <= room < room_of_target:
                    target, room_of_target = i, room
                    if not best_fit:
                        break
            if target < 0:
                if len(used) < limit:  # a new open block (length < seq_len here)
                    used.append(length)
                    break
                used.pop(used.index(max(used)) if best_fit else 0)  # the fullest (oldest) is emitted
                count += 1
                continue
            used[target] += length
            if used[target] == seq_len:
                used.pop(target)
                count += 1
            break
    return count + len(used)


def group_bounds(pool: Pieces, num_consumers: int) -> np.ndarray:
    """TB6 pack: consumer ``c`` takes the whole pieces starting in pool positions
    ``[c·P/C, (c+1)·P/C)``; returns the piece index each consumer's group starts at (C+1 values)."""
    starts = pool.ends - (pool.stop - pool.start)
    owner = np.minimum(starts * num_consumers // max(pool.total, 1), num_consumers - 1)  # nondecreasing
    bounds: np.ndarray = np.searchsorted(owner, np.arange(num_consumers + 1), side="left")
    return bounds
