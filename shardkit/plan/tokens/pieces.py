"""Work as arrays (specs/token-blocks.md TB1, TB6-TB7): a run of pieces held as three int64
arrays with the running total of their positions, so a pool of a million documents is a few
arrays, not a million objects, and cutting it at a position is two binary searches. Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, overload

import numpy as np


class Piece(NamedTuple):
    """Positions ``start … stop-1`` of document ``doc_index`` (epoch order)."""

    doc_index: int
    start: int
    stop: int

    @property
    def length(self) -> int:
        return self.stop - self.start


_make_piece = functools.partial(tuple.__new__, Piece)


class Pieces(Sequence[Piece]):
    """Pieces ``(doc[i], start[i], stop[i])`` in order; a read-only sequence of :class:`Piece`
    that compares equal to any sequence of the same pieces. Slices are views."""

    __slots__ = ("doc", "start", "stop", "_ends", "_positive")

    def __init__(self, doc: np.ndarray, start: np.ndarray, stop: np.ndarray) -> None:
        self.doc, self.start, self.stop = (np.asarray(a, dtype=np.int64) for a in (doc, start, stop))
        self._ends: np.ndarray | None = None
        self._positive: bool | None = None

    @classmethod
    def of(cls, pieces: Sequence[Piece] | Pieces) -> Pieces:
        if isinstance(pieces, Pieces):
            return pieces
        table = np.array([tuple(p) for p in pieces], dtype=np.int64).reshape(-1, 3)
        return cls(table[:, 0], table[:, 1], table[:, 2])

    @classmethod
    def whole(cls, positions: Sequence[int] | np.ndarray) -> Pieces:
        """Every document with at least one position, whole, in order (TB1)."""
        counts = np.asarray(positions, dtype=np.int64)
        docs = np.flatnonzero(counts > 0)
        return cls(docs, np.zeros(len(docs), dtype=np.int64), counts[docs])

    @property
    def ends(self) -> np.ndarray:
        """Positions from the first piece up to the end of each piece (int64, cached)."""
        if self._ends is None:
            self._ends = np.cumsum(self.stop - self.start)
        return self._ends

    @property
    def total(self) -> int:
        return int(self.ends[-1]) if len(self.doc) else 0

    @property
    def positive(self) -> bool:
        """Every piece holds at least one position (what a split or a cut gives, cached)."""
        if self._positive is None:
            self._positive = bool(np.all(self.stop > self.start))
        return self._positive

    def locate(self, position: int) -> tuple[int, int, int]:
        """``(d, offset, i)``: position ``position`` (counted along these pieces) is position
        ``offset`` of document ``d``, in piece ``i``: one binary search (TB25)."""
        i = int(np.searchsorted(self.ends, position, side="right"))
        return int(self.doc[i]), int(self.stop[i]) - (int(self.ends[i]) - position), i

    def cut(self, begin: int, end: int) -> Pieces:
        """The pieces covering positions ``[begin, end)`` (counted along these pieces)."""
        ends, count = self.ends, len(self.doc)
        end = min(end, self.total)
        if begin >= end:
            return Pieces(self.doc[:0], self.start[:0], self.stop[:0])
        first = int(np.searchsorted(ends, begin, side="right"))  # the piece holding position begin
        last = int(np.searchsorted(ends, end, side="left"))  # the piece holding position end-1
        doc, start, stop = (a[first:min(last, count - 1) + 1].copy() for a in (self.doc, self.start, self.stop))
        start[0] += begin - (int(ends[first]) - int(self.stop[first] - self.start[first]))
        stop[-1] -= int(ends[last]) - end
        return Pieces(doc, start, stop)

    def __len__(self) -> int:
        return len(self.doc)

    @overload
    def __getitem__(self, index: int) -> Piece: ...

    @overload
    def __getitem__(self, index: slice) -> Pieces: ...

    def __getitem__(self, index: int | slice) -> Piece | Pieces:
        if isinstance(index, slice):
            return Pieces(self.doc[index], self.start[index], self.stop[index])
        return Piece(int(self.doc[index]), int(self.start[index]), int(self.stop[index]))

    def __iter__(self) -> Iterator[Piece]:
        # tuple.__new__(Piece, t) is what Piece(...) does, without a Python frame per piece
        return map(_make_piece, zip(self.doc.tolist(), self.start.tolist(), self.stop.tolist(), strict=True))

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == tuple(b) for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(map(repr, self[:4]))
        return f"Pieces([{shown}{', …' if len(self) > 4 else ''}], {len(self)} pieces)"
