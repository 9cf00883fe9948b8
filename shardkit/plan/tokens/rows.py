"""Token values for blocks: ``input_ids``, ``labels``, ``position_ids``, ``cu_seqlens``
(specs/token-blocks.md, TB2-TB4, TB20). Pure numpy; the loader turns the arrays into tensors.

``labels`` come in one of two layouts (``LABEL_LAYOUTS``, TB20): ``"shifted"`` — ``labels[r, j]``
is the target of input ``j`` (for a hand-written loss, no shift) — or ``"hf"`` — ``labels[r, j]``
is the target of input ``j - 1`` and column 0 is ``ignore_index``, the layout a Hugging Face
``*ForCausalLM`` expects, since its loss shifts ``labels`` itself (:func:`to_hf_labels`).

A **segment** of a row is a maximal run of consecutive positions of one document; position ids
restart at 0 at every segment and padding is one segment of its own, so ``cu_seqlens`` always
ends at ``B × L``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.tokens.blocks import Block, Piece

IGNORE_INDEX = -100
LABEL_LAYOUTS = ("shifted", "hf")  # TB20: the target of input j at column j, or at column j + 1


@dataclass(frozen=True)
class TokenOptions:
    """Boundary tokens and label rules (``mask_doc_starts``: no loss on a document's first token;
    ``labels``: the layout of the targets, ``LABEL_LAYOUTS``)."""

    eos_id: int | None = None
    bos_id: int | None = None
    pad_id: int = 0
    mask_doc_starts: bool = False
    ignore_index: int = IGNORE_INDEX
    labels: str = "shifted"


def to_hf_labels(labels: np.ndarray, ignore_index: int = IGNORE_INDEX) -> np.ndarray:
    """Shifted targets (B, L) → the Hugging Face layout, in place (TB20): the target of input
    ``j`` moves to column ``j + 1``, column 0 becomes ``ignore_index``. A causal-LM loss that
    shifts (``logits[:, :-1]`` against ``labels[:, 1:]``) then trains exactly the targets of
    inputs ``0 … L-2``; the target of a row's last input has no column and is not trained."""
    if labels.shape[-1]:
        labels[..., 1:] = labels[..., :-1].copy()
        labels[..., 0] = ignore_index
    return labels


class TokenDocs:
    """The epoch's documents in order (any integer dtype) with optional per-token loss masks."""

    def __init__(self, documents: Sequence[np.ndarray], options: TokenOptions,
                 loss_masks: Sequence[np.ndarray] | None = None) -> None:
        extra = int(options.bos_id is not None) + int(options.eos_id is not None)
        lengths = np.array([len(d) + extra if len(d) else 0 for d in documents], dtype=np.int64)
        self._setup(documents, lengths, options, loss_masks)

    @classmethod
    def from_lengths(cls, documents: Any, segment_lengths: Any, options: TokenOptions,
                     loss_masks: Any = None, next_doc: Any = None) -> TokenDocs:
        """Documents given by index on demand (``documents[d]``), their segment lengths known
        beforehand (the loader reads only the documents a consumer needs). ``segment_lengths``
        and ``next_doc`` may be arrays over the whole epoch or over a consumer's documents
        (``DocArray``, TB25; then ``next_doc`` is given)."""
        docs = cls.__new__(cls)
        if next_doc is None:
            segment_lengths = np.asarray(segment_lengths, dtype=np.int64)
        docs._setup(documents, segment_lengths, options, loss_masks, next_doc)
        return docs

    def _setup(self, documents: Any, segment_lengths: Any, options: TokenOptions, loss_masks: Any,
               next_doc: Any = None) -> None:
        self.documents, self.options, self.loss_masks = documents, options, loss_masks
        self.segment_lengths = segment_lengths
        self.next_doc = next_nonempty(segment_lengths) if next_doc is None else next_doc


def next_nonempty(segment_lengths: np.ndarray) -> np.ndarray:
    """Per document, the next document with a non-empty segment (-1: none): where a concat
    label crosses to (TB4)."""
    n = len(segment_lengths)
    index = np.where(np.asarray(segment_lengths) > 0, np.arange(n), n)
    following = np.minimum.accumulate(index[::-1])[::-1]  # first non-empty at or after d
    nxt = np.concatenate([following[1:], [n]]) if n else following
    return np.where(nxt < n, nxt, -1).astype(np.int64)


def merge_pieces(pieces: Sequence[Piece]) -> Sequence[Piece]:
    if len(pieces) < 2:
        return pieces
    out: list[Piece] = []
    for p in pieces:
        if out and out[-1].doc_index == p.doc_index and out[-1].stop == p.start:
            out[-1] = Piece(p.doc_index, out[-1].start, p.stop)
        else:
            out.append(p)
    return out


def first_target(docs: TokenDocs, d: int) -> int | None:
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


Empty = Callable[[tuple[int, ...], Any], np.ndarray]


@functools.lru_cache(maxsize=32)
def constant(value: int, length: int, dtype: Any = np.int64) -> np.ndarray:
    """``value`` repeated ``length`` times (read-only, shared): padding, boundary tokens."""
    values = np.full(length, value, dtype=dtype)
    values.flags.writeable = False
    return values


@functools.lru_cache(maxsize=8)
def _counting(n: int) -> np.ndarray:
    """``0 … n-1`` (read-only, shared): the position ids of a row segment are a slice of it."""
    values = np.arange(n, dtype=np.int64)
    values.flags.writeable = False
    return values


def segment_token(o: Any, values: np.ndarray, index: int) -> int:
    """Token ``index`` of the segment ``[bos] + values + [eos]`` (``o``: the token options)."""
    if o.bos_id is not None:
        if index == 0:
            return int(o.bos_id)
        index -= 1
    return int(values[index]) if index < len(values) else int(o.eos_id)


def segment_slices(values: np.ndarray, start: int, stop: int, bos: np.ndarray | None,
            eos: np.ndarray | None) -> list[np.ndarray]:
    """Segment tokens ``start … stop-1`` of a document ``values`` (``[bos] + values + [eos]``,
    each a 1-element array or ``None``) as views, to be joined by the caller."""
    out, n = [], len(values)
    if bos is not None:
        if start == 0 and stop > 0:
            out.append(bos)
        start, stop = max(start - 1, 0), stop - 1
    if min(stop, n) > start:
        out.append(values[start:min(stop, n)])
    if eos is not None and stop > n >= start:
        out.append(eos)
    return out


class _Parts:
    """A batch's arrays as lists of views — document slices, shared constants — that one
    ``np.concatenate`` per array joins straight into the rows: the batch is a few C copies,
    with Python work per row segment, never per token and no batch-sized temporaries.

    Labels are not gathered: inside a segment each label is the next input of the same row
    segment, so they are the inputs shifted by one (one copy), then each segment's last label
    (the segment token after it, or its document's target) and the padding are written over."""

    def __init__(self, docs: TokenDocs, seq_len: int, mode: str, provenance: bool) -> None:
        o = docs.options
        self.docs, self.mode, self.provenance = docs, mode, provenance
        self.bos = None if o.bos_id is None else constant(o.bos_id, 1)
        self.eos = None if o.eos_id is None else constant(o.eos_id, 1)
        self.extra = int(self.bos is not None) + int(self.eos is not None)
        self.counting = _counting(seq_len)
        self.ids: list[np.ndarray] = []
        self.last_labels: list[int] = []  # per segment (padding included): the label of its last position
        self.pads: list[tuple[int, int]] = []  # (segment number, positions) of each padding segment
        self.keep: list[np.ndarray] | None = None if docs.loss_masks is None else []
        self.positions: list[np.ndarray] = []
        self.doc_index: list[np.ndarray] = []
        self.token_offset: list[np.ndarray] = []

    def segment(self, d: int, start: int, stop: int) -> None:
        """Positions ``start … stop-1`` of document ``d``: inputs, the label of the last one
        (the next segment token, TB4), position ids, provenance."""
        docs, n = self.docs, stop - start
        values = docs.documents[d]
        length = int(docs.segment_lengths[d])
        size = len(values)
        if size + self.extra != length:
            raise PlanError(f"document {d}: {size} tokens, but its length was given as {length} "
                            "with boundary tokens; the data changed since the lengths were read")
        if self.bos is None and (self.eos is None or stop <= size):  # most segments: one view
            self.ids.append(values[start:stop])
        elif self.bos is None:  # ... or its tokens (if any) and the EOS
            if start < size:
                self.ids.append(values[start:size])
            self.ids.append(self.eos)  # type: ignore[arg-type]
        else:
            self.ids += segment_slices(values, start, stop, self.bos, self.eos)
        if stop < length:  # the row ends inside the document: the label is its next segment token
            self.last_labels.append(segment_token(docs.options, values, stop))
        else:  # the segment's last position: its target lies in the next document (concat)
            target = None if self.mode == "pack" else first_target(docs, d)
            self.last_labels.append(docs.options.ignore_index if target is None else target)
        if self.keep is not None:
            self.keep += self._mask(d, values, start + 1, min(stop + 1, length))
            if stop == length:
                self.keep.append(constant(True, 1, bool))
        self.positions.append(self.counting[:n])
        if self.provenance:
            self.doc_index.append(constant(d, n) if n == len(self.counting) else np.full(n, d, dtype=np.int64))
            self.token_offset.append(np.arange(start, stop, dtype=np.int64))

    def _mask(self, d: int, values: np.ndarray, start: int, stop: int) -> list[np.ndarray]:
        """The ``loss_mask`` of segment tokens ``start … stop-1`` (BOS/EOS count as 1)."""
        mask = np.asarray(self.docs.loss_masks[d], dtype=bool)
        if len(mask) != len(values):
            raise PlanError(f"document {d}: loss_mask has {len(mask)} entries for {len(values)} tokens")
        true = constant(True, 1, bool)
        return segment_slices(mask, start, stop, None if self.bos is None else true, None if self.eos is None else true)

    def padding(self, count: int) -> None:
        o = self.docs.options
        self.pads.append((len(self.last_labels), count))
        self.ids.append(constant(o.pad_id, count))
        self.last_labels.append(o.ignore_index)
        if self.keep is not None:
            self.keep.append(constant(True, count, bool))
        self.positions.append(constant(0, count))
        if self.provenance:
            self.doc_index.append(constant(-1, count))
            self.token_offset.append(constant(0, count))

    def join(self, num_rows: int, seq_len: int, cu: np.ndarray, empty: Empty) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        keys = ("input_ids", "position_ids", *(("doc_index", "token_offset") if self.provenance else ()))
        parts = (self.ids, self.positions, self.doc_index, self.token_offset)
        for key, pieces in zip(keys, parts, strict=False):
            out[key] = empty((num_rows, seq_len), np.int64)
            if pieces:
                np.concatenate(pieces, out=out[key].reshape(-1), casting="unsafe")
        labels = out["labels"] = empty((num_rows, seq_len), np.int64)
        flat = labels.reshape(-1)
        if len(flat):
            flat[:-1] = out["input_ids"].reshape(-1)[1:]
            ends = cu[1:]
            flat[ends - 1] = self.last_labels
            for segment, count in self.pads:
                flat[ends[segment] - count : ends[segment]] = self.docs.options.ignore_index
        if self.keep:  # a label whose target's loss_mask is 0 is ignored (TB4)
            keep = np.concatenate(self.keep).reshape(num_rows, seq_len)
            np.putmask(labels, ~keep, self.docs.options.ignore_index)
        if self.docs.options.labels == "hf":
            to_hf_labels(labels, self.docs.options.ignore_index)
        return out


def assemble(blocks: Sequence[Block], docs: TokenDocs, seq_len: int, mode: str, provenance: bool = True,
             empty: Empty = np.empty) -> dict[str, Any]:
    """Rows for ``blocks``: int64 ``input_ids``/``labels``/``position_ids`` of shape (B, L),
    int32 ``cu_seqlens``, int ``max_seqlen``/``num_tokens``/``num_padding``; with ``provenance``
    also int64 ``doc_index`` (-1 at padding) and ``token_offset`` (for audits). ``empty(shape,
    dtype)`` allocates the (B, L) arrays and ``cu_seqlens`` (e.g. in the memory a batch is sent
    from).

    Each row segment (a run of one document's positions) adds views of its document; one
    ``np.concatenate`` per array then writes the rows (``_Parts``)."""
    parts = _Parts(docs, seq_len, mode, provenance)
    seqlens: list[int] = []
    for r, block in enumerate(blocks):
        col = 0
        for d, start, stop in merge_pieces(block.pieces):
            parts.segment(d, start, stop)
            seqlens.append(stop - start)
            col += stop - start
        if col != seq_len - block.num_padding:
            raise PlanError(f"block {r}: {col} positions + {block.num_padding} padding != seq_len {seq_len}")
        if block.num_padding:
            parts.padding(block.num_padding)
            seqlens.append(block.num_padding)
    cu = empty((len(seqlens) + 1,), np.int32)
    cu[0] = 0
    np.cumsum(np.array(seqlens, dtype=np.int32), out=cu[1:])
    num_padding = sum(block.num_padding for block in blocks)
    return {**parts.join(len(blocks), seq_len, cu, empty), "cu_seqlens": cu, "max_seqlen": max(seqlens, default=0),
            "num_tokens": len(blocks) * seq_len - num_padding, "num_padding": num_padding}
