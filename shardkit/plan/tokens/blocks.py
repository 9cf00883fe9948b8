"""Read-time token blocks: the cutting state machine (specs/token-blocks.md, TB1-TB9).

Pure: works on *positions* only (how many input positions each document has), never on token
values, so a plan can be computed from per-sample lengths. A document's **segment** is
``[bos] + tokens + [eos]`` (each optional); its input positions are ``0 … n-1`` where
``n = len(segment)`` in ``concat`` mode and ``len(segment) - 1`` in ``pack`` mode (TB2, TB3).

Work is a list of :class:`Piece` (a document index and a half-open range of its positions);
a cutter turns it into :class:`Block` s of exactly ``seq_len`` positions. Its state
(``to_dict``/``from_dict``) is the cursor (piece index, document index, token offset) and, in
pack mode, the open blocks (the carry) — everything needed to continue exactly (TB5).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from shardkit.errors import PlanError, StateError
from shardkit.plan.tokens.cursor import write_row
from shardkit.plan.tokens.pieces import Piece, Pieces

__all__ = ["MODES", "Block", "BlockCutter", "BlockOptions", "Piece", "Pieces", "epoch_pieces", "num_positions"]

MODES = ("concat", "pack")
_RUN = 4096  # pieces made into tuples at a time


@dataclass(frozen=True)
class BlockOptions:
    """How documents become blocks. ``fit``/``long_docs``/``open_blocks`` apply to pack mode."""

    seq_len: int
    mode: str = "concat"
    fit: str = "best"
    long_docs: str = "split"
    open_blocks: int = 16

    def __post_init__(self) -> None:
        if self.seq_len < 1:
            raise PlanError(f"seq_len must be >= 1, got {self.seq_len}")
        if self.mode not in MODES:
            raise PlanError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.fit not in ("best", "first"):
            raise PlanError(f"fit must be 'best' or 'first', got {self.fit!r}")
        if self.long_docs not in ("split", "truncate"):
            raise PlanError(f"long_docs must be 'split' or 'truncate', got {self.long_docs!r}")
        if self.open_blocks < 1:
            raise PlanError(f"open_blocks must be >= 1, got {self.open_blocks}")


class Block(NamedTuple):
    """One row: ``pieces`` in order, then ``num_padding`` pad positions; ``truncated`` are the
    positions dropped (pack mode, ``long_docs='truncate'``) when this block was cut."""

    pieces: tuple[Piece, ...]
    num_padding: int
    truncated: tuple[Piece, ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(p.length for p in self.pieces)


def num_positions(segment_lengths: np.ndarray, mode: str) -> np.ndarray:
    """Input positions per document: the segment length (concat) or one less (pack, TB3)."""
    lengths = np.asarray(segment_lengths, dtype=np.int64)
    return lengths if mode == "concat" else np.maximum(lengths - 1, 0)


def epoch_pieces(positions: Sequence[int] | np.ndarray) -> Pieces:
    """The whole epoch as work: every document with at least one position, in order."""
    return Pieces.whole(positions)


class BlockCutter:
    """Cuts ``pieces`` into blocks of ``options.seq_len`` positions; ``next_block()`` returns
    ``None`` when the work is exhausted. Deterministic; not thread-safe."""

    def __init__(self, pieces: Sequence[Piece], options: BlockOptions) -> None:
        self.pieces = Pieces.of(pieces)
        self.options = options
        self.piece_index = 0
        self.offset = 0  # positions of pieces[piece_index] already taken
        self.bins: list[list[Piece]] = []  # pack mode: the open blocks (carry)
        self._open: dict[int, int] = {}  # document -> its pieces in the open blocks
        self.used: list[int] = []  # positions in each open block
        self._items: dict[int, list[Piece]] = {}  # the pieces as tuples, made a run of them at a time
        self._run_lo, self._run = 0, self._items.get(0, [])  # the run last used: pieces _run_lo …
        self._run_len = len(self._run)
        self._ends: list[int] | None = None  # concat: positions up to the end of each piece

    # ---- state (TB5) -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        cursor = self.pieces[self.piece_index] if self.piece_index < len(self.pieces) else None
        return {
            "piece_index": self.piece_index,
            "doc_index": -1 if cursor is None else cursor.doc_index,
            "token_offset": 0 if cursor is None else cursor.start + self.offset,
            "carry": [[list(p) for p in b] for b in self.bins],
        }

    def cursor_row(self, blocks: int) -> tuple[int, ...]:
        """``cursor_row({**self.to_dict(), "blocks": blocks})`` (cursor.py, TB28), written from
        the cutter directly: a pack-mode batch's row costs its carry's ints, not a dict of lists."""
        index = self.piece_index
        if index < len(self.pieces):
            # concat batches jump (advance): one piece read, not a run of them made (pack walks them)
            cursor = self.pieces[index] if self.options.mode == "concat" else self._piece(index)
            # plain ints: every piece is made of them (_take, from_dict)
            return write_row(int(blocks), index, cursor.doc_index, cursor.start + self.offset, self.bins)
        return write_row(int(blocks), index, -1, 0, self.bins)

    def open_documents(self) -> Container[int]:
        """The documents of the open blocks (pack mode's carry; none in concat mode), kept as
        blocks open and close: no walk over the carry."""
        return self._open

    def _opened(self, piece: Piece) -> None:
        self._open[piece.doc_index] = self._open.get(piece.doc_index, 0) + 1

    @classmethod
    def from_dict(cls, pieces: Sequence[Piece], options: BlockOptions, state: dict[str, Any]) -> BlockCutter:
        cutter = cls(pieces, options)
        index, doc, offset = int(state["piece_index"]), int(state["doc_index"]), int(state["token_offset"])
        if index == len(cutter.pieces):
            ok = doc == -1
        else:
            piece = cutter.pieces[index] if 0 <= index < len(cutter.pieces) else None
            ok = piece is not None and piece.doc_index == doc and piece.start <= offset < piece.stop
        if not ok:
            raise StateError(f"token-block state points at piece {index} (document {doc}, offset {offset}), "
                             f"which is not in this consumer's {len(cutter.pieces)} pieces")
        cutter.piece_index = index
        cutter.offset = 0 if doc == -1 else offset - cutter.pieces[index].start
        cutter.bins = [[Piece(*map(int, p)) for p in b] for b in state.get("carry", [])]
        for piece in itertools.chain.from_iterable(cutter.bins):
            cutter._opened(piece)
        cutter.used = [sum(p.length for p in b) for b in cutter.bins]
        if options.mode == "concat" and cutter.bins:
            raise StateError("token-block state: concat mode has no carry")
        return cutter

    # ---- cutting -----------------------------------------------------------------------
    def next_block(self) -> Block | None:
        return self._next_concat() if self.options.mode == "concat" else self._next_pack()

    def _piece(self, index: int) -> Piece:
        """Piece ``index`` as a tuple: made ``_RUN`` at a time when first needed (a consumer's
        first block costs a run, not all its pieces, TB25)."""
        at = index - self._run_lo
        if 0 <= at < self._run_len:  # the cutter walks forward: almost always the current run
            return self._run[at]
        run, at = divmod(index, _RUN)
        items = self._items.get(run)
        if items is None:
            if len(self._items) > 2:
                self._items.clear()
            items = self._items[run] = list(self.pieces[run * _RUN:(run + 1) * _RUN])
        self._run_lo, self._run, self._run_len = run * _RUN, items, len(items)
        return items[at]

    def _take(self, limit: int, head: Piece | None = None) -> Piece:
        """Take up to ``limit`` positions of the current piece (``head``, if the caller has it),
        advancing the cursor."""
        if head is None:
            head = self._piece(self.piece_index)
        start = head.start + self.offset
        stop = min(head.stop, start + limit)
        self.offset += stop - start
        if head.start + self.offset == head.stop:
            self.piece_index, self.offset = self.piece_index + 1, 0
        return Piece(head.doc_index, start, stop)

    def _next_concat(self) -> Block | None:
        """The next ``seq_len`` positions: a binary search over the pieces' running ends (TB18),
        then one ``Piece`` per piece the block touches (contiguous ones of a document merged)."""
        if self.piece_index >= len(self.pieces):
            return None
        index, offset, begin, stop_at, last = self._cut_concat(1)
        ends, taken = self._running_ends(), list[Piece]()
        for i in range(index, last + 1):
            d, start, stop = self._piece(i)
            lo = start + (offset if i == index else 0)
            hi = stop - max(ends[i] - stop_at, 0)
            if taken and taken[-1].doc_index == d and taken[-1].stop == lo:
                taken[-1] = Piece(d, taken[-1].start, hi)
            else:
                taken.append(Piece(d, lo, hi))
        return Block(tuple(taken), self.options.seq_len - (stop_at - begin))

    def advance(self, count: int) -> tuple[int, int]:
        """Concat mode: move the cursor as ``count`` calls of :meth:`next_block` would, without
        making the blocks (TB35): ``(begin, taken)`` — the work position the first of them starts
        at and how many positions they hold (``count × seq_len`` unless the work ends first; the
        rest of those blocks is padding)."""
        if self.options.mode != "concat":
            raise PlanError("advance() cuts concat blocks; pack mode makes its blocks one by one")
        if self.piece_index >= len(self.pieces):
            ends = self._running_ends()
            return (ends[-1] if ends else 0), 0
        _, _, begin, stop_at, _ = self._cut_concat(count)
        return begin, stop_at - begin

    def _running_ends(self) -> list[int]:
        if self._ends is None:  # Python lists: per block, a few list reads beat numpy scalar calls
            self._ends = self.pieces.ends.tolist()
        return self._ends

    def _cut_concat(self, count: int) -> tuple[int, int, int, int, int]:
        """Move the cursor (inside the work) past the next ``count`` concat blocks: the
        ``(piece_index, offset)`` they begin at, their first and end work positions, and the
        piece they end in."""
        ends, index, offset = self._running_ends(), self.piece_index, self.offset
        begin = (ends[index - 1] if index else 0) + offset
        stop_at = min(begin + count * self.options.seq_len, ends[-1])
        last = bisect.bisect_left(ends, stop_at, lo=index)  # the piece the blocks end in
        if ends[last] == stop_at:  # they end where a piece ends
            self.piece_index, self.offset = last + 1, 0
        else:
            self.piece_index, self.offset = last, stop_at - (ends[last - 1] if last else 0)
        return index, offset, begin, stop_at, last

    def _next_pack(self) -> Block | None:
        seq_len, count = self.options.seq_len, len(self.pieces)
        while self.piece_index < count:
            head = self._piece(self.piece_index)
            remaining = head.stop - head.start - self.offset
            if remaining >= seq_len:  # a full block of one document (TB3: split or truncate)
                piece = self._take(seq_len, head)
                dropped: tuple[Piece, ...] = ()
                if self.options.long_docs == "truncate" and self.offset:
                    dropped = (self._take(head.stop, head),)
                return Block((piece,), 0, dropped)
            target = self._choose_bin(remaining)
            if target is None:
                if len(self.bins) < self.options.open_blocks:
                    self.bins.append([])
                    self.used.append(0)
                    continue
                return self._emit(self._bin_to_close())
            piece = self._take(remaining, head)
            self.bins[target].append(piece)
            self._opened(piece)
            self.used[target] += remaining
            if self.used[target] == seq_len:
                return self._emit(target)
        return self._emit(0) if self.bins else None

    def _choose_bin(self, length: int) -> int | None:
        seq_len = self.options.seq_len
        best, best_room = None, seq_len + 1
        for i, used in enumerate(self.used):
            room = seq_len - used
            if room >= length:
                if self.options.fit == "first":
                    return i
                if room < best_room:
                    best, best_room = i, room
        return best

    def _bin_to_close(self) -> int:
        if self.options.fit == "first":
            return 0  # the oldest
        return self.used.index(max(self.used))  # the fullest, the oldest among equals

    def _emit(self, index: int) -> Block:
        pieces, used = self.bins.pop(index), self.used.pop(index)
        for piece in pieces:
            left = self._open[piece.doc_index] - 1
            if left:
                self._open[piece.doc_index] = left
            else:
                del self._open[piece.doc_index]
        return Block(tuple(pieces), self.options.seq_len - used)
