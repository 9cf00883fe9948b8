"""Token values for blocks: ``input_ids``, shifted ``labels``, ``position_ids``, ``cu_seqlens``
(specs/token-blocks.md, TB2-TB4). Pure numpy; the loader turns the arrays into tensors.

A **segment** of a row is a maximal run of consecutive positions of one document; position ids
restart at 0 at every segment and padding is one segment of its own, so ``cu_seqlens`` always
ends at ``B × L``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.token_blocks import Block, Piece

IGNORE_INDEX = -100


@dataclass(frozen=True)
class TokenOptions:
    """Boundary tokens and label rules (``mask_doc_starts``: no loss on a document's first token)."""

    eos_id: int | None = None
    bos_id: int | None = None
    pad_id: int = 0
    mask_doc_starts: bool = False
    ignore_index: int = IGNORE_INDEX


class TokenDocs:
    """The epoch's documents in order (any integer dtype) with optional per-token loss masks."""

    def __init__(self, documents: Sequence[np.ndarray], options: TokenOptions,
                 loss_masks: Sequence[np.ndarray] | None = None) -> None:
        extra = int(options.bos_id is not None) + int(options.eos_id is not None)
        lengths = np.array([len(d) + extra if len(d) else 0 for d in documents], dtype=np.int64)
        self._setup(documents, lengths, options, loss_masks)

    @classmethod
    def from_lengths(cls, documents: Any, segment_lengths: np.ndarray, options: TokenOptions,
                     loss_masks: Any = None) -> TokenDocs:
        """Documents given by index on demand (``documents[d]``), their segment lengths known
        beforehand (the loader reads only the documents a consumer needs)."""
        docs = cls.__new__(cls)
        docs._setup(documents, np.asarray(segment_lengths, dtype=np.int64), options, loss_masks)
        return docs

    def _setup(self, documents: Any, segment_lengths: np.ndarray, options: TokenOptions, loss_masks: Any) -> None:
        self.documents, self.options, self.loss_masks = documents, options, loss_masks
        self.segment_lengths = segment_lengths
        self.next_doc = next_nonempty(segment_lengths)

    def _slice(self, d: int, start: int, stop: int, values: np.ndarray, bos: Any, eos: Any) -> np.ndarray:
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

    def segment_slice(self, d: int, start: int, stop: int) -> np.ndarray:
        """Segment tokens ``start … stop-1`` of ``d`` (clipped), int64, without building the segment."""
        o = self.options
        return self._slice(d, start, stop, np.asarray(self.documents[d]), o.bos_id, o.eos_id).astype(np.int64)

    def mask_slice(self, d: int, start: int, stop: int) -> np.ndarray | None:
        """The loss mask of ``segment_slice`` (``None``: no loss_mask field, all ones)."""
        if self.loss_masks is None:
            return None
        o = self.options
        mask = np.asarray(self.loss_masks[d], dtype=bool)
        if len(mask) != len(self.documents[d]):
            raise PlanError(f"document {d}: loss_mask has {len(mask)} entries for {len(self.documents[d])} tokens")
        return self._slice(d, start, stop, mask, None if o.bos_id is None else True,
                           None if o.eos_id is None else True)


def next_nonempty(segment_lengths: np.ndarray) -> np.ndarray:
    """Per document, the next document with a non-empty segment (-1: none): where a concat
    label crosses to (TB4)."""
    n = len(segment_lengths)
    index = np.where(np.asarray(segment_lengths) > 0, np.arange(n), n)
    following = np.minimum.accumulate(index[::-1])[::-1]  # first non-empty at or after d
    nxt = np.concatenate([following[1:], [n]]) if n else following
    return np.where(nxt < n, nxt, -1).astype(np.int64)


def merge_pieces(pieces: Sequence[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        if out and out[-1].doc_index == p.doc_index and out[-1].stop == p.start:
            out[-1] = Piece(p.doc_index, out[-1].start, p.stop)
        else:
            out.append(p)
    return out


def _first_target(docs: TokenDocs, d: int) -> int | None:
    """The label of document ``d``'s last concat position: the next document's first segment
    token, or ``None`` (ignore) at the epoch's end, with ``mask_doc_starts`` or a masked token."""
    nxt = int(docs.next_doc[d])
    if nxt < 0 or docs.options.mask_doc_starts:
        return None
    if docs.options.bos_id is not None:
        return docs.options.bos_id
    if docs.loss_masks is not None and not docs.loss_masks[nxt][0]:
        return None
    return int(docs.documents[nxt][0])


def _fill(ids: np.ndarray, labels: np.ndarray, docs: TokenDocs, piece: Piece, mode: str) -> None:
    """Inputs and labels of ``piece`` into row slices: a label is the next segment token (TB4)."""
    d, s, e = piece
    seg = docs.segment_slice(d, s, e + 1)
    ids[:] = seg[:e - s]
    inside = len(seg) - 1  # positions whose target lies in this segment
    mask = docs.mask_slice(d, s + 1, e + 1)
    labels[:inside] = seg[1:] if mask is None else np.where(mask, seg[1:], docs.options.ignore_index)
    if inside < e - s:
        target = None if mode == "pack" else _first_target(docs, d)
        labels[inside] = docs.options.ignore_index if target is None else target


def assemble(blocks: Sequence[Block], docs: TokenDocs, seq_len: int, mode: str) -> dict[str, Any]:
    """Rows for ``blocks``: int64 ``input_ids``/``labels``/``position_ids``/``doc_index``/
    ``token_offset`` of shape (B, L), int32 ``cu_seqlens``, int ``max_seqlen``/``num_tokens``/
    ``num_padding``. ``doc_index`` is -1 at padding (for audits)."""
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
        if col != seq_len - block.num_padding:
            raise PlanError(f"block {r}: {col} positions + {block.num_padding} padding != seq_len {seq_len}")
        if block.num_padding:
            seqlens.append(block.num_padding)
    cu = np.zeros(len(seqlens) + 1, dtype=np.int32)
    np.cumsum(seqlens, out=cu[1:])
    num_padding = sum(blk.num_padding for blk in blocks)
    return {"input_ids": ids, "labels": labels, "position_ids": positions, "cu_seqlens": cu,
            "max_seqlen": max(seqlens, default=0), "doc_index": doc_index, "token_offset": offsets,
            "num_tokens": b * seq_len - num_padding, "num_padding": num_padding}
