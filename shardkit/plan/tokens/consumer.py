"""What one consumer of a token plan needs to read and cut its work, over its own documents
only (specs/token-blocks.md TB12, TB23, TB25). Pure.

A consumer's documents are a range of the epoch order: from just after the last document with
positions before its first one (so the empty neighbours TB23 reads are inside), to the first
document with positions after the last one it reads (in concat mode the last one it reads is
the document whose first token labels its last position). Every per-document array the worker
uses is a :class:`DocArray` over that range, so a worker of a plan over 10**9 documents holds
the arrays of its own ~N / C documents, not of the epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardkit.plan.tokens.blocks import Piece, num_positions
from shardkit.plan.tokens.index import EpochIndex
from shardkit.plan.tokens.lengths_source import DocArray
from shardkit.plan.tokens.pieces import Pieces
from shardkit.plan.tokens.plan import TokenPlan
from shardkit.plan.tokens.pool import document_needs


@dataclass(frozen=True)
class ConsumerView:
    """Consumer ``consumer``'s work and its documents' arrays (indexed by document index)."""

    pieces: Sequence[Piece]
    needs: list[tuple[int, int]]  # (document, last piece that needs it), in need order (TB12)
    samples: DocArray  # global (manifest-order) sample index
    segments: DocArray  # segment length
    positions: DocArray  # input positions
    num_tokens: DocArray  # tokens, without boundary tokens: what TB23 checks each read against
    next_doc: DocArray  # the next document with a non-empty segment (-1: none), TB4


def document_range(index: EpochIndex, pieces: Pieces, concat: bool) -> tuple[int, int]:
    """Documents ``lo … hi-1`` that hold every document ``pieces`` reads and their empty
    neighbours (TB23): O(documents in the range)."""
    if not len(pieces):
        return 0, 0
    first, last = int(pieces.doc.min()), int(pieces.doc.max())
    lo = index.previous_with_positions(first - 1) + 1 if first > 0 else 0
    hi = index.next_with_positions(last + 1)
    if concat and hi < index.num_docs:  # the document a label crosses to, and the empty ones after it
        hi = index.next_with_positions(hi + 1)
    return lo, hi


def local_next_nonempty(segments: DocArray, num_docs: int) -> DocArray:
    """``next_nonempty`` over a range: a document with no non-empty one after it in the range
    points at ``segments.hi`` (the range ends just before a document with positions) or -1."""
    values = segments.values
    n = len(values)
    index = np.where(values > 0, np.arange(n), n)
    following = np.minimum.accumulate(index[::-1])[::-1] if n else index
    nxt = np.concatenate([following[1:], [n]]) if n else following
    beyond = segments.hi if segments.hi < num_docs else -1
    return segments.map(np.where(nxt < n, nxt + segments.lo, beyond).astype(np.int64))


def consumer_view(plan: TokenPlan, consumer: int, extra_tokens: int) -> ConsumerView:
    """What consumer ``consumer`` of ``plan`` reads (``extra_tokens``: boundary tokens per
    non-empty document)."""
    return work_view(plan.index, plan.level.options.mode, plan.level.split.consumers[consumer].pieces, extra_tokens)


def work_view(index: EpochIndex, mode: str, work: Sequence[Piece], extra_tokens: int) -> ConsumerView:
    """What a consumer whose work is ``work`` (pieces of ``index``'s stream) reads: the arrays of
    the documents from its first to its last (a global-order consumer's span the epoch, TB34)."""
    pieces = Pieces.of(work)
    lo, hi = document_range(index, pieces, mode == "concat")
    samples, segments = index.doc_arrays(lo, hi)
    positions = segments.map(num_positions(segments.values, mode))
    next_doc = local_next_nonempty(segments, index.num_docs)
    needs = document_needs(pieces, positions, next_doc if mode == "concat" else None)
    num_tokens = segments.map(np.where(segments.values > 0, segments.values - extra_tokens, 0))
    return ConsumerView(pieces, needs, samples, segments, positions, num_tokens, next_doc)
