"""The per-document token-block implementation that the vectorised one replaced, kept as a
reference (specs/token-blocks.md TB2, TB4): a concat cutter that walks the work one piece at a
time, and rows filled one piece at a time from explicit segment slices.

The library cuts concat blocks by binary search over running piece ends and joins a batch's
rows with one ``np.concatenate`` per array (plan/tokens/blocks.py, plan/tokens/rows.py); the
properties in tests/unit/plan/test_token_vectorised.py check both against this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shardkit.plan.tokens.blocks import Block, Piece
from shardkit.plan.tokens.rows import TokenDocs, merge_pieces


class ConcatWalker:
    """Concat blocks of ``seq_len`` from ``pieces``, taking one piece (or part of one) at a time."""

    def __init__(self, pieces: Sequence[Piece], seq_len: int) -> None:
        self.pieces, self.seq_len = [Piece(*p) for p in pieces], seq_len
        self.piece_index, self.offset = 0, 0

    def state(self) -> dict[str, Any]:
        cursor = self.pieces[self.piece_index] if self.piece_index < len(self.pieces) else None
        return {"piece_index": self.piece_index, "doc_index": -1 if cursor is None else cursor.doc_index,
                "token_offset": 0 if cursor is None else cursor.start + self.offset, "carry": []}

    def _take(self, limit: int) -> Piece:
        head = self.pieces[self.piece_index]
        left = (head.stop - head.start) - self.offset
        taken = Piece(head.doc_index, head.start + self.offset, head.start + self.offset + min(left, limit))
        if limit >= left:
            self.piece_index += 1
            self.offset = 0
        else:
            self.offset += limit
        return taken

    def next_block(self) -> Block | None:
        used, taken = 0, []
        while used < self.seq_len and self.piece_index < len(self.pieces):
            piece = self._take(self.seq_len - used)
            used += piece.length
            if taken and taken[-1].doc_index == piece.doc_index and taken[-1].stop == piece.start:
                taken[-1] = Piece(piece.doc_index, taken[-1].start, piece.stop)
            else:
                taken.append(piece)
        return Block(tuple(taken), self.seq_len - used) if taken else None


def _slice(values: np.ndarray, start: int, stop: int, bos: Any, eos: Any) -> np.ndarray:
    """Segment tokens ``start … stop-1`` of ``[bos] + values + [eos]`` (clipped)."""
    n = len(values)
    if n == 0:
        return values[:0]
    has_bos, has_eos = int(bos is not None), int(eos is not None)
    stop = min(stop, n + has_bos + has_eos)
    parts = [values[max(start - has_bos, 0):min(stop - has_bos, n)]]
    if has_bos and start == 0:
        parts.insert(0, np.array([bos], dtype=values.dtype))
    if has_eos and stop == n + has_bos + has_eos:
        parts.append(np.array([eos], dtype=values.dtype))
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _first_target(docs: TokenDocs, d: int) -> int | None:
    """The first segment token of the next document with one, searched one document at a time
    (``None``: no target, or the label is ignored)."""
    later = [e for e in range(d + 1, len(docs.segment_lengths)) if docs.segment_lengths[e] > 0]
    o = docs.options
    if not later or o.mask_doc_starts:
        return None
    if o.bos_id is not None:
        return o.bos_id
    if docs.loss_masks is not None and not docs.loss_masks[later[0]][0]:
        return None
    return int(docs.documents[later[0]][0])


def _fill(ids: np.ndarray, labels: np.ndarray, docs: TokenDocs, piece: Piece, mode: str) -> None:
    d, s, e = piece
    o = docs.options
    seg = _slice(np.asarray(docs.documents[d]), s, e + 1, o.bos_id, o.eos_id).astype(np.int64)
    ids[:] = seg[:e - s]
    inside = len(seg) - 1
    if docs.loss_masks is None:
        labels[:inside] = seg[1:]
    else:
        mask = _slice(np.asarray(docs.loss_masks[d], dtype=bool), s + 1, e + 1,
                      None if o.bos_id is None else True, None if o.eos_id is None else True)
        labels[:inside] = np.where(mask, seg[1:], o.ignore_index)
    if inside < e - s:
        target = None if mode == "pack" else _first_target(docs, d)
        labels[inside] = o.ignore_index if target is None else target


def reference_rows(blocks: Sequence[Block], docs: TokenDocs, seq_len: int, mode: str) -> dict[str, Any]:
    """The rows of ``blocks`` as ``assemble`` returns them (with provenance), one piece at a time."""
    o, b = docs.options, len(blocks)
    ids = np.full((b, seq_len), o.pad_id, dtype=np.int64)
    labels = np.full((b, seq_len), o.ignore_index, dtype=np.int64)
    positions = np.zeros((b, seq_len), dtype=np.int64)
    doc_index = np.full((b, seq_len), -1, dtype=np.int64)
    offsets = np.zeros((b, seq_len), dtype=np.int64)
    seqlens: list[int] = []
    for r, block in enumerate(blocks):
        col = 0
        for piece in merge_pieces(block.pieces):
            n, cols = piece.length, slice(col, col + piece.length)
            _fill(ids[r, cols], labels[r, cols], docs, piece, mode)
            positions[r, cols] = np.arange(n)
            doc_index[r, cols] = piece.doc_index
            offsets[r, cols] = np.arange(piece.start, piece.stop)
            seqlens.append(n)
            col += n
        if block.num_padding:
            seqlens.append(block.num_padding)
    cu = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
    num_padding = sum(blk.num_padding for blk in blocks)
    return {"input_ids": ids, "labels": labels, "position_ids": positions, "cu_seqlens": cu,
            "max_seqlen": max(seqlens, default=0), "doc_index": doc_index, "token_offset": offsets,
            "num_tokens": b * seq_len - num_padding, "num_padding": num_padding}


def reference_cut(pool: Sequence[Piece], begin: int, end: int) -> list[Piece]:
    """The pieces covering pool positions ``[begin, end)``, walking the pool."""
    out, at = [], 0
    for p in pool:
        lo, hi = max(begin, at), min(end, at + p.length)
        if lo < hi:
            out.append(Piece(p.doc_index, p.start + lo - at, p.start + hi - at))
        at += p.length
        if at >= end:
            break
    return out


def reference_needs(pieces: Sequence[Piece], positions: np.ndarray,
                    next_doc: np.ndarray | None) -> list[tuple[int, int]]:
    """Documents in first-need order with the last piece needing each, one piece at a time."""
    needs: dict[int, int] = {}
    for i, piece in enumerate(pieces):
        needs[piece.doc_index] = i
        if next_doc is not None and piece.stop == positions[piece.doc_index] and next_doc[piece.doc_index] >= 0:
            needs[int(next_doc[piece.doc_index])] = i
    return list(needs.items())


def replayed_state(work: Any, options: Any, blocks: int) -> dict[str, Any]:
    """A consumer's cutter state after ``blocks`` blocks by replaying its cutter from the start
    (TB5): what ``state_dict()`` computed before consumers reported their states (TB28)."""
    from shardkit.plan.tokens.blocks import BlockCutter

    cutter = BlockCutter(work.pieces, options)
    for _ in range(blocks):
        cutter.next_block()
    return {**cutter.to_dict(), "blocks": blocks}
