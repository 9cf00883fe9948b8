"""Concat-mode rows as windows of a consumer's token stream (specs/token-blocks.md TB35). Pure numpy.

In ``concat`` mode a consumer's batch of ``B`` blocks is the next ``B × L`` positions of its
work, cut into rows; blocks never need to exist as objects. :class:`ConcatRows` writes those
positions straight from the documents' views — one list append per piece the window touches —
and derives everything else with a few vectorised operations over the window: the labels are
the inputs shifted by one, corrected only where the work is not one stream (a boundary that is
not "the next document from its first token", or any document end under
``mask_doc_starts``); the segments (for ``position_ids`` and ``cu_seqlens``) are the row
starts merged with the piece boundaries that change document.

The arrays equal :func:`~shardkit.plan.tokens.rows.assemble`'s for the same blocks, bit for bit
(a property test compares the two on random work, boundary tokens, label layouts, padding and
resumed cursors), with Python work per piece of the window instead of per row segment and
per block. Loss masks are not handled here: a dataset with a ``loss_mask_field`` goes through
``assemble``.
"""

from __future__ import annotations

import bisect
import functools
from typing import Any

import numpy as np

from shardkit.plan.tokens.pieces import Pieces
from shardkit.plan.tokens.rows import (
    Empty,
    TokenDocs,
    constant,
    first_target,
    segment_slices,
    segment_token,
    to_hf_labels,
)


@functools.lru_cache(maxsize=4)
def _arange(n: int) -> np.ndarray:
    values = np.arange(n, dtype=np.int64)
    values.flags.writeable = False
    return values


class ConcatRows:
    """The rows of windows of ``pieces`` (a consumer's concat work) over ``docs``.

    Precomputed once, over the work (O(pieces), like its running ends): where a label must be
    written by hand and where a segment breaks. Not thread-safe; one per consumer iteration."""

    def __init__(self, pieces: Pieces, docs: TokenDocs, seq_len: int, provenance: bool = False) -> None:
        self.pieces, self.docs, self.seq_len, self.provenance = pieces, docs, seq_len, provenance
        o = docs.options
        self.bos = None if o.bos_id is None else constant(o.bos_id, 1)
        self.eos = None if o.eos_id is None else constant(o.eos_id, 1)
        self.ends = pieces.ends.tolist() if len(pieces) else []
        doc, start, stop, ends = pieces.doc, pieces.start, pieces.stop, pieces.ends
        if len(doc):
            seg = np.asarray(docs.segment_lengths[doc], dtype=np.int64)
            doc_end = stop == seg
            nxt, nxt_start = doc[1:], start[1:]
            merged = (nxt == doc[:-1]) & (nxt_start == stop[:-1])  # one segment goes on
            onward = doc_end[:-1] & (nxt_start == 0) & (nxt == np.asarray(docs.next_doc[doc[:-1]]))
            inner = ends[:-1]
        else:
            doc_end = merged = onward = np.zeros(0, dtype=bool)
            inner = ends[:0]
        self._breaks = inner[~merged]  # positions (along the work) where a segment starts anew
        if o.mask_doc_starts:  # every document's last label is ignored; the rest of a jump by hand
            self._ignored = ends[doc_end]
            by_hand = ~(merged | onward) & ~doc_end[:-1]
        else:
            self._ignored = ends[:0]
            by_hand = ~(merged | onward)
        self._by_hand = np.flatnonzero(by_hand)  # piece numbers whose last label is written by hand

    def rows(self, begin: int, real: int, num_blocks: int, empty: Empty = np.empty) -> dict[str, Any]:
        """``num_blocks`` rows holding positions ``begin … begin+real-1`` of the work, then padding
        (``real ≤ num_blocks × seq_len``): the arrays and counts of ``assemble``."""
        seq_len, o = self.seq_len, self.docs.options
        size = num_blocks * seq_len
        shape = (num_blocks, seq_len)
        out: dict[str, np.ndarray] = {"input_ids": empty(shape, np.int64), "position_ids": empty(shape, np.int64)}
        if self.provenance:
            out["doc_index"], out["token_offset"] = empty(shape, np.int64), empty(shape, np.int64)
        labels = out["labels"] = empty(shape, np.int64)
        ids, flat = out["input_ids"].reshape(-1), labels.reshape(-1)
        if real:
            first = bisect.bisect_right(self.ends, begin)
            last = bisect.bisect_left(self.ends, begin + real)
            docs = self.pieces.doc[first:last + 1].tolist()
            lows = self.pieces.start[first:last + 1].tolist()
            highs = self.pieces.stop[first:last + 1].tolist()
            lows[0] += begin - (self.ends[first] - (highs[0] - lows[0]))
            highs[-1] -= self.ends[last] - (begin + real)
            np.concatenate(self._views(docs, lows, highs), out=ids[:real], casting="unsafe")
            flat[:real - 1] = ids[1:real]
            self._hand_labels(flat, begin, real, first, last, docs[-1], highs[-1])
            if self.provenance:
                self._provenance(out, docs, lows, highs, real)
        segments = self._segments(begin, real, size)
        pos = out["position_ids"].reshape(-1)
        real_segments = segments[:len(segments) - self._padding_segments(real, size)]
        pos[:real] = _arange(real) - np.repeat(np.cumsum(real_segments) - real_segments, real_segments)
        pos[real:] = 0
        ids[real:] = o.pad_id
        flat[real:] = o.ignore_index
        if self.provenance:
            out["doc_index"].reshape(-1)[real:] = -1
            out["token_offset"].reshape(-1)[real:] = 0
        if o.labels == "hf":
            to_hf_labels(labels, o.ignore_index)
        cu = empty((len(segments) + 1,), np.int32)
        cu[0] = 0
        np.cumsum(segments, out=cu[1:])
        return {**out, "cu_seqlens": cu, "max_seqlen": int(segments.max()) if len(segments) else 0,
                "num_tokens": real, "num_padding": size - real}

    def _views(self, docs: list[int], lows: list[int], highs: list[int]) -> list[np.ndarray]:
        """Segment positions ``lows[i] … highs[i]-1`` of each document, as views and constants."""
        get, eos, parts = self.docs.documents.__getitem__, self.eos, []
        if self.bos is None:
            for d, lo, hi in zip(docs, lows, highs, strict=True):
                values = get(d)
                n = len(values)
                if hi <= n:
                    parts.append(values[lo:hi])
                else:  # the segment's last position: the EOS (hi is at most n + 1)
                    if lo < n:
                        parts.append(values[lo:n])
                    parts.append(eos)
            return parts
        for d, lo, hi in zip(docs, lows, highs, strict=True):
            parts += segment_slices(get(d), lo, hi, self.bos, eos)
        return parts

    def _hand_labels(self, flat: np.ndarray, begin: int, real: int, first: int, last: int,
                     last_doc: int, last_high: int) -> None:
        """The labels the shift got wrong: the window's last one, jumps, ignored document ends."""
        flat[real - 1] = self._label_after(last_doc, last_high)
        lo, hi = np.searchsorted(self._by_hand, [first, last])  # of pieces first … last-1, ending inside
        for i in self._by_hand[lo:hi].tolist():
            flat[self.ends[i] - begin - 1] = self._label_after(int(self.pieces.doc[i]), int(self.pieces.stop[i]))
        a, b = np.searchsorted(self._ignored, [begin + 1, begin + real])  # document ends inside
        if b > a:
            flat[self._ignored[a:b] - begin - 1] = self.docs.options.ignore_index

    def _label_after(self, d: int, stop: int) -> int:
        """The label of document ``d``'s position ``stop - 1``: its next segment token, or the
        next document's first (``ignore_index`` where there is none or it is masked)."""
        docs, o = self.docs, self.docs.options
        if stop < int(docs.segment_lengths[d]):
            return segment_token(o, docs.documents[d], stop)
        target = first_target(docs, d)
        return o.ignore_index if target is None else target

    def _padding_segments(self, real: int, size: int) -> int:
        pad = size - real
        return (1 if real % self.seq_len else 0) + (pad - (-real) % self.seq_len) // self.seq_len if pad else 0

    def _segments(self, begin: int, real: int, size: int) -> np.ndarray:
        """Segment lengths (int32): real positions split at rows and document changes, then one
        padding segment per row (the rest of the row real positions end in, then whole rows)."""
        seq_len = self.seq_len
        lo, hi = np.searchsorted(self._breaks, [begin + 1, begin + real])
        # a few dozen cuts: a set of Python ints merges them faster than numpy's union1d
        cuts = sorted(set((self._breaks[lo:hi] - begin).tolist()).union(range(seq_len, real, seq_len)))
        segments: np.ndarray = (np.diff(np.array([0, *cuts, real], dtype=np.int64)) if real
                                else np.zeros(0, dtype=np.int64))
        pad = size - real
        if pad:
            partial = (-real) % seq_len
            head = np.full(1 if partial else 0, partial, dtype=np.int64)
            segments = np.concatenate((segments, head, np.full((pad - partial) // seq_len, seq_len, dtype=np.int64)))
        return segments.astype(np.int32)

    def _provenance(self, out: dict[str, np.ndarray], docs: list[int], lows: list[int], highs: list[int],
                    real: int) -> None:
        """``doc_index`` and ``token_offset`` of the window's real positions."""
        low, lengths = np.array(lows, dtype=np.int64), np.array(highs, dtype=np.int64) - lows
        out["doc_index"].reshape(-1)[:real] = np.repeat(np.array(docs, dtype=np.int64), lengths)
        out["token_offset"].reshape(-1)[:real] = _arange(real) - np.repeat(np.cumsum(lengths) - lengths - low, lengths)
