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
        self.documents, self.options, self.loss_masks = documents, options, loss_masks
        extra = int(options.bos_id is not None) + int(options.eos_id is not None)
        self.segment_lengths = np.array([len(d) + extra if len(d) else 0 for d in documents], dtype=np.int64)
        # next document with a non-empty segment: where a concat label crosses to (TB4)
        nxt = np.full(len(documents), -1, dtype=np.int64)
        following = -1
        for d in range(len(documents) - 1, -1, -1):
            nxt[d] = following
            if self.segment_lengths[d] > 0:
                following = d
        self.next_doc = nxt

    def segment(self, d: int) -> np.ndarray:
        """``[bos] + tokens + [eos]`` as int64; empty for an empty document (TB2)."""
        o = self.options
        parts = [np.asarray(self.documents[d], dtype=np.int64)]
        if not len(parts[0]):
            return parts[0]
        if o.bos_id is not None:
            parts.insert(0, np.array([o.bos_id], dtype=np.int64))
        if o.eos_id is not None:
            parts.append(np.array([o.eos_id], dtype=np.int64))
        return np.concatenate(parts)

    def segment_mask(self, d: int) -> np.ndarray:
        """Loss mask per segment token: the document's ``loss_mask`` field, 1 for BOS/EOS."""
        n = len(self.documents[d])
        mask = np.ones(n, dtype=bool) if self.loss_masks is None else np.asarray(self.loss_masks[d], dtype=bool)
        if len(mask) != n:
            raise PlanError(f"document {d}: loss_mask has {len(mask)} entries for {n} tokens")
        o = self.options
        ones = np.ones(1, dtype=bool)
        if not n:
            return mask
        return np.concatenate([ones] * (o.bos_id is not None) + [mask] + [ones] * (o.eos_id is not None))


def merge_pieces(pieces: Sequence[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        if out and out[-1].doc_index == p.doc_index and out[-1].stop == p.start:
            out[-1] = Piece(p.doc_index, out[-1].start, p.stop)
        else:
            out.append(p)
    return out


def _targets(docs: TokenDocs, piece: Piece, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Label tokens and their loss mask for ``piece``'s positions (the next segment token)."""
    d, s, e = piece
    seg, mask = docs.segment(d), docs.segment_mask(d)
    targets, keep = seg[s + 1:e + 1], mask[s + 1:e + 1]
    if len(targets) < e - s:  # the last position of a concat segment: the next document's start
        nxt = int(docs.next_doc[d])
        if nxt < 0 or docs.options.mask_doc_starts or mode == "pack":
            head, head_keep = np.array([0], dtype=np.int64), np.zeros(1, dtype=bool)
        else:
            head, head_keep = docs.segment(nxt)[:1], docs.segment_mask(nxt)[:1]
        targets, keep = np.concatenate([targets, head]), np.concatenate([keep, head_keep])
    return targets, keep


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
            ids[r, cols] = docs.segment(piece.doc_index)[piece.start:piece.stop]
            targets, keep = _targets(docs, piece, mode)
            labels[r, cols] = np.where(keep, targets, o.ignore_index)
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
