"""Concat rows as stream windows (specs/token-blocks.md TB35) against the block-by-block path:
``BlockCutter.advance`` moves the cursor exactly as ``next_block`` calls do, and
``ConcatRows.rows`` writes exactly the arrays ``assemble`` writes for those blocks — over random
documents, boundary tokens, ``mask_doc_starts``, label layouts, provenance, padding, resumed
cursors and the out-of-order, split work of an elastic level."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan.tokens.blocks import Block, BlockCutter, BlockOptions, Piece, epoch_pieces, num_positions
from shardkit.plan.tokens.concat_rows import ConcatRows
from shardkit.plan.tokens.pieces import Pieces
from shardkit.plan.tokens.pool import remainder_pool, split_work
from shardkit.plan.tokens.rows import TokenDocs, TokenOptions, assemble

SENTINEL = 987_654


def _garbage(shape, dtype):
    return np.full(shape, SENTINEL, dtype=dtype)


def _same_batches(work, docs, cut, batch, provenance, start=None):
    """Every batch of ``work`` both ways, from cutter state ``start``; returns the batches' count."""
    slow = BlockCutter(work.pieces, cut) if start is None else BlockCutter.from_dict(work.pieces, cut, start)
    fast = BlockCutter(work.pieces, cut) if start is None else BlockCutter.from_dict(work.pieces, cut, start)
    rows = ConcatRows(Pieces.of(work.pieces), docs, cut.seq_len, provenance)
    done, count = 0 if start is None else int(start["blocks"]), 0
    while done < work.num_blocks:
        n = min(batch, work.num_blocks - done)
        blocks = [slow.next_block() or Block((), cut.seq_len) for _ in range(n)]
        begin, taken = fast.advance(n)
        assert fast.to_dict() == slow.to_dict()
        assert taken == sum(b.num_tokens for b in blocks)
        want = assemble(blocks, docs, cut.seq_len, "concat", provenance, _garbage)
        got = rows.rows(begin, taken, n, _garbage)
        assert set(got) == set(want)
        for key, value in want.items():
            assert np.array_equal(got[key], value), (key, got[key], value)
            assert np.asarray(got[key]).dtype == np.asarray(value).dtype, key
        done, count = done + n, count + 1
    return count


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    lengths=st.lists(st.integers(0, 25), min_size=1, max_size=14),
    bos=st.booleans(),
    eos=st.booleans(),
    mask_doc_starts=st.booleans(),
    labels=st.sampled_from(["shifted", "hf"]),
    provenance=st.booleans(),
    dtype=st.sampled_from([np.uint16, np.int32, np.int64]),
    first=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 9), st.integers(0, 3)),
    second=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 9)),
)
def test_stream_windows_equal_the_rows_of_their_blocks(data, lengths, bos, eos, mask_doc_starts, labels, provenance,
                                                       dtype, first, second):
    """TB35 against TB2-TB4/TB20 (``assemble``): a first level, its consumers resumed from a
    kill's cutter states, and an elastic second level over the remainder pool."""
    docs = [np.array(data.draw(st.lists(st.integers(3, 60_000), min_size=n, max_size=n)), dtype=dtype)
            for n in lengths]
    options = TokenOptions(eos_id=2 if eos else None, bos_id=1 if bos else None, pad_id=7,
                           mask_doc_starts=mask_doc_starts, labels=labels)
    token_docs = TokenDocs(docs, options)
    pool = epoch_pieces(num_positions(token_docs.segment_lengths, "concat"))
    (consumers, batch, seq_len, kill), (consumers2, batch2, seq_len2) = first, second
    cut = BlockOptions(seq_len, "concat")
    split = split_work(pool, consumers, batch, cut)
    states = []
    for work in split.consumers:
        _same_batches(work, token_docs, cut, batch, provenance)
        done = min(kill * batch, work.num_blocks)
        cutter = BlockCutter(work.pieces, cut)
        cutter.advance(done)
        state = json.loads(json.dumps({**cutter.to_dict(), "blocks": done}))
        _same_batches(work, token_docs, cut, batch, provenance, state)
        states.append(state)
    cut2 = BlockOptions(seq_len2, "concat")
    for work in split_work(remainder_pool(split.consumers, states, cut), consumers2, batch2, cut2).consumers:
        _same_batches(work, token_docs, cut2, batch2, provenance)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), lengths=st.lists(st.integers(1, 12), min_size=1, max_size=8),
       seq_len=st.integers(1, 9), batch=st.integers(1, 4), mask_doc_starts=st.booleans(), eos=st.booleans())
def test_windows_over_work_that_jumps(data, lengths, seq_len, batch, mask_doc_starts, eos):
    """Work that is not one stream — pieces of documents in any order, split anywhere, a
    document twice (a global-order consumer's block ranges, an elastic remainder): each jump's
    label is written by hand, as ``assemble`` does."""
    docs = [np.arange(10 * i + 3, 10 * i + 3 + n) for i, n in enumerate(lengths)]
    options = TokenOptions(eos_id=2 if eos else None, mask_doc_starts=mask_doc_starts)
    token_docs = TokenDocs(docs, options)
    seg = token_docs.segment_lengths
    rows = data.draw(st.lists(st.tuples(st.integers(0, len(docs) - 1), st.integers(0, 12), st.integers(1, 12)),
                              min_size=1, max_size=8))
    pieces = [Piece(d, min(s, int(seg[d]) - 1), min(s, int(seg[d]) - 1) + min(n, int(seg[d]) - min(s, int(seg[d]) - 1)))
              for d, s, n in rows]

    class Work:
        pass

    work = Work()
    work.pieces = Pieces.of(pieces)
    work.num_blocks = -(-work.pieces.total // seq_len) + data.draw(st.integers(0, 2))
    assert _same_batches(work, token_docs, BlockOptions(seq_len, "concat"), batch, data.draw(st.booleans()))
