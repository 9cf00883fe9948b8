"""A consumer's cutter state as a flat row of ints, for the trip beside its batch (specs/token-blocks.md
TB28). Pure.

A consumer knows its cutter state (TB5) at every batch boundary for free: it is the cutter it
cuts with. ``cursor_row`` writes that state as ints — ``blocks, piece_index, doc_index,
token_offset, open blocks``, then per open block its piece count and ``d, s, e`` per piece — so
it travels in the ``BatchMeta`` of the batch (exact integers, X9) and in the loader's int64
gathers across ranks; ``cursor_state`` reads it back as the JSON state ``BlockCutter.to_dict``
plus ``"blocks"`` gives. The training process then saves the state the consumer reported at
the consumed boundary instead of recomputing it (no replay, no search).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from shardkit.errors import StateError

_HEAD = 5  # blocks, piece_index, doc_index, token_offset, open blocks


def cursor_row(state: dict[str, Any]) -> tuple[int, ...]:
    """``state`` (TB5: ``to_dict()`` plus ``"blocks"``) as a flat row of ints."""
    carry = [[tuple(int(x) for x in piece) for piece in block] for block in state["carry"]]
    return write_row(int(state["blocks"]), int(state["piece_index"]), int(state["doc_index"]),
                     int(state["token_offset"]), carry)


def write_row(blocks: int, piece_index: int, doc_index: int, token_offset: int,
              carry: Sequence[Sequence[Sequence[int]]]) -> tuple[int, ...]:
    """The row of a cutter state given field by field (``carry``: its open blocks' pieces, each
    ``(d, s, e)`` of plain ints); the one writer of the format (``cursor_row``, and
    ``BlockCutter.cursor_row`` per batch)."""
    row = [blocks, piece_index, doc_index, token_offset, len(carry)]
    for block in carry:
        row.append(len(block))
        row.extend(itertools.chain.from_iterable(block))
    return tuple(row)


def cursor_state(row: Sequence[int]) -> dict[str, Any]:
    """The TB5 state of a row written by :func:`cursor_row` (trailing values are ignored:
    rows padded for a gather); a row too short for what it says is a ``StateError``."""
    values = [int(x) for x in row]
    if len(values) < _HEAD:
        raise StateError(f"consumer cursor: expected at least {_HEAD} ints, got {len(values)}")
    blocks, piece_index, doc_index, token_offset, count = values[:_HEAD]
    carry: list[list[list[int]]] = []
    at = _HEAD
    for _ in range(count):
        if at >= len(values) or at + 1 + 3 * values[at] > len(values):
            raise StateError(f"consumer cursor: open block {len(carry)} runs past the row's {len(values)} ints")
        n, at = values[at], at + 1
        carry.append([values[i:i + 3] for i in range(at, at + 3 * n, 3)])
        at += 3 * n
    return {"piece_index": piece_index, "doc_index": doc_index, "token_offset": token_offset, "carry": carry,
            "blocks": blocks}


def row_length(row: Sequence[int]) -> int:
    """The ints of the row at the start of ``row`` (a padded gather row holds more)."""
    at = _HEAD
    for _ in range(int(row[_HEAD - 1])):
        at += 1 + 3 * int(row[at])
    return at
