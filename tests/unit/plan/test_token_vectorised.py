"""The vectorised token-block path against the per-document implementation it replaced
(tests/helpers/token_reference.py): concat blocks and cutter states, rows (inputs, labels,
position ids, cu_seqlens, provenance), pool cuts and the documents a consumer reads
(specs/token-blocks.md TB18, with TB2-TB6 and TB12)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError
from shardkit.plan.tokens.blocks import Block, BlockCutter, BlockOptions, Piece, epoch_pieces, num_positions
from shardkit.plan.tokens.pieces import Pieces
from shardkit.plan.tokens.pool import consumer_blocks, cut_range, document_needs, remainder_pool, split_work
from shardkit.plan.tokens.rows import TokenDocs, TokenOptions, assemble, next_nonempty
from tests.helpers.token_reference import ConcatWalker, reference_cut, reference_needs, reference_rows

SENTINEL = 987_654  # what an output slot holds until assemble writes it


def _garbage(shape, dtype):
    return np.full(shape, SENTINEL, dtype=dtype)


def _check_rows(blocks, docs, seq_len, mode):
    want = reference_rows(blocks, docs, seq_len, mode)
    got = assemble(blocks, docs, seq_len, mode, True, _garbage)
    assert set(got) == set(want)
    for key, value in want.items():
        assert np.array_equal(got[key], value), key
        assert np.asarray(got[key]).dtype == np.asarray(value).dtype, key
    lean = assemble(blocks, docs, seq_len, mode, False)
    assert "doc_index" not in lean and "token_offset" not in lean
    for key in ("input_ids", "labels", "position_ids", "cu_seqlens"):
        assert np.array_equal(lean[key], want[key]), key


def _walk(work, options, batch):
    """Every block of ``work`` through the library cutter; in concat mode also through the
    per-document walker, block for block and state for state."""
    cutter = BlockCutter(work.pieces, options)
    walker = ConcatWalker(list(work.pieces), options.seq_len) if options.mode == "concat" else None
    blocks = []
    for _ in range(work.num_blocks):
        block = cutter.next_block()
        if walker is not None:
            assert block == walker.next_block()
            assert cutter.to_dict() == walker.state()
        blocks.append(block if block is not None else Block((), options.seq_len))
    return [blocks[i:i + batch] for i in range(0, len(blocks), batch)]


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    lengths=st.lists(st.integers(0, 25), min_size=1, max_size=12),
    mode=st.sampled_from(["concat", "pack"]),
    bos=st.booleans(),
    eos=st.booleans(),
    masked=st.booleans(),
    mask_doc_starts=st.booleans(),
    long_docs=st.sampled_from(["split", "truncate"]),
    dtype=st.sampled_from([np.uint16, np.int32, np.int64]),
    first=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 9), st.integers(0, 3)),
    second=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 9)),
)
def test_blocks_and_rows_match_the_per_document_reference(data, lengths, mode, bos, eos, masked, mask_doc_starts,
                                                          long_docs, dtype, first, second):
    """Over random lengths (empty ones, ones longer than seq_len), both modes, boundary tokens,
    loss masks, and a second, elastic level over the remainder pool of a kill (whose pieces are
    split documents out of order): the same blocks, states and rows as the reference."""
    docs = [np.array(data.draw(st.lists(st.integers(3, 60_000), min_size=n, max_size=n)), dtype=dtype)
            for n in lengths]
    masks = [np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))) for n in lengths] if masked else None
    options = TokenOptions(eos_id=2 if eos else None, bos_id=1 if bos else None, pad_id=0,
                           mask_doc_starts=mask_doc_starts)
    token_docs = TokenDocs(docs, options, masks)
    pool = epoch_pieces(num_positions(token_docs.segment_lengths, mode))
    (consumers, batch, seq_len, kill), (consumers2, batch2, seq_len2) = first, second
    cut = BlockOptions(seq_len, mode, long_docs=long_docs, open_blocks=2)
    split = split_work(pool, consumers, batch, cut)
    states = []
    for work in split.consumers:
        for blocks in _walk(work, cut, batch):
            _check_rows(blocks, token_docs, seq_len, mode)
        done = min(kill * batch, work.num_blocks)
        cutter = BlockCutter(work.pieces, cut)
        for _ in range(done):
            cutter.next_block()
        states.append(json.loads(json.dumps({**cutter.to_dict(), "blocks": done})))
    cut2 = BlockOptions(seq_len2, mode, long_docs=long_docs, open_blocks=2)
    for work in split_work(remainder_pool(split.consumers, states, cut), consumers2, batch2, cut2).consumers:
        for blocks in _walk(work, cut2, batch2):
            _check_rows(blocks, token_docs, seq_len2, mode)


pieces = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 8), st.integers(1, 9)), max_size=12).map(
    lambda rows: [Piece(d, s, s + n) for d, s, n in rows])


@settings(max_examples=200, deadline=None)
@given(pool=pieces, begin=st.integers(0, 60), width=st.integers(0, 60))
def test_cutting_a_pool_by_binary_search_matches_walking_it(pool, begin, width):
    """TB6: the pieces covering pool positions [begin, end) — a piece cut at both ends, whole
    pieces between — whatever the pool."""
    got = cut_range(pool, begin, begin + width)
    assert got == reference_cut(pool, begin, begin + width)
    assert isinstance(got, Pieces) and list(got[1:]) == reference_cut(pool, begin, begin + width)[1:]


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=10), pool=pieces, concat=st.booleans())
def test_the_documents_a_consumer_reads_match_the_piece_walk(lengths, pool, concat):
    """TB12: each piece's document, and in concat mode the next non-empty document when a piece
    ends its document, in the order first needed, with the last piece that needs it."""
    positions = np.array(lengths + [9] * 7, dtype=np.int64)
    nxt = next_nonempty(positions) if concat else None
    work = [p for p in pool if p.stop <= positions[p.doc_index]]
    assert document_needs(work, positions, nxt) == reference_needs(work, positions, nxt)


def test_the_pool_is_arrays_that_compare_as_pieces():
    pool = epoch_pieces([3, 0, 5])
    assert pool == [Piece(0, 0, 3), Piece(2, 0, 5)] and pool != [Piece(0, 0, 3)]
    assert pool.total == 8 and list(pool.ends) == [3, 8]
    assert pool.cut(2, 4) == [Piece(0, 2, 3), Piece(2, 0, 1)]
    assert consumer_blocks(split_work(pool, 1, 1, BlockOptions(4)).consumers[0], BlockOptions(4))[1] == \
        Block((Piece(2, 1, 5),), 0)


def test_a_document_whose_length_changed_since_the_plan_is_refused():
    """TB18: rows are never cut from a document whose tokens differ from its planned length."""
    docs = TokenDocs.from_lengths([np.array([5, 6, 7])], np.array([5]), TokenOptions(eos_id=2))
    with pytest.raises(PlanError, match="document 0: 3 tokens, but its length was given as 5"):
        assemble([Block((Piece(0, 0, 4),), 1)], docs, 5, "concat")
