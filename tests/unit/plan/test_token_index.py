"""The epoch stream as an index (specs/token-blocks.md TB25-TB26): the windowed index against
the arrays it replaces, cutter states by binary search against the replay, and what a consumer
reads over its own documents against the whole-epoch arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanParams
from shardkit.plan.tokens.blocks import BlockCutter, BlockOptions, Piece, num_positions
from shardkit.plan.tokens.config import TokenBlocks
from shardkit.plan.tokens.consumer import consumer_view
from shardkit.plan.tokens.index import EpochIndex, segment_lengths
from shardkit.plan.tokens.lengths_source import ArrayLengths, DocArray, PeriodicLengths
from shardkit.plan.tokens.pieces import Pieces
from shardkit.plan.tokens.plan import build_token_plan, epoch_order, order_plan, single_params
from shardkit.plan.tokens.pool import ConsumerWork, consumer_state, document_needs, remainder_pool, split_work
from shardkit.plan.tokens.rows import TokenDocs, TokenOptions, assemble, next_nonempty


@st.composite
def epochs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, PlanParams, int, str]:
    sizes = np.array(draw(st.lists(st.integers(0, 9), min_size=1, max_size=6)), dtype=np.int64)
    lengths = np.array(draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, 5]), min_size=int(sizes.sum()),
                                     max_size=int(sizes.sum()))), dtype=np.int64)
    params = PlanParams(seed=draw(st.integers(0, 5)), epoch=draw(st.integers(0, 2)), shuffle=draw(st.booleans()),
                        shuffle_window=draw(st.integers(1, 5)), spread=draw(st.sampled_from([1, 4])))
    return sizes, lengths, params, draw(st.integers(0, 2)), draw(st.sampled_from(["concat", "pack"]))


def _dense(sizes, lengths, params, extra, mode):
    samples = epoch_order(order_plan(sizes, params))
    segments = segment_lengths(lengths[samples], extra)
    return samples, segments, num_positions(segments, mode)


@settings(max_examples=200, deadline=None)
@given(case=epochs())
def test_the_windowed_index_answers_as_the_whole_epoch_arrays_do(case) -> None:
    """TB25: totals, locate, cuts and the neighbours with positions, from chunk totals and one
    chunk at a time, equal those of the materialised epoch order (any shard sizes, empty and
    one-token documents, window, shuffle, boundary tokens, mode)."""
    sizes, lengths, params, extra, mode = case
    samples, segments, positions = _dense(sizes, lengths, params, extra, mode)
    index = EpochIndex.windowed(sizes, single_params(params), order_plan(sizes, params), ArrayLengths(lengths),
                                extra, mode)
    whole = Pieces.whole(positions)
    assert (index.total, index.num_pieces, index.num_docs) == (whole.total, len(whole), len(samples))
    got_samples, got_segments = index.docs(0, index.num_docs)
    assert np.array_equal(got_samples, samples) and np.array_equal(got_segments, segments)
    for p in range(index.total):
        i = int(np.searchsorted(whole.ends, p, side="right"))
        assert index.locate(p) == whole.locate(p) == (int(whole.doc[i]), p - int(whole.ends[i] - whole.stop[i]), i)
    for a in range(index.total + 1):
        for b in range(a, index.total + 1, 3):
            assert index.cut(a, b) == whole.cut(a, b)
    has = np.flatnonzero(positions > 0)
    for d in range(len(samples)):
        before, after = has[has <= d], has[has >= d]
        assert index.previous_with_positions(d) == (int(before[-1]) if len(before) else -1)
        assert index.next_with_positions(d) == (int(after[0]) if len(after) else len(samples))


def _replayed(work: ConsumerWork, options: BlockOptions, blocks: int) -> dict:
    cutter = BlockCutter(work.pieces, options)
    for _ in range(blocks):
        cutter.next_block()
    return {**cutter.to_dict(), "blocks": blocks}


@settings(max_examples=150, deadline=None)
@given(case=epochs(), consumers=st.integers(1, 4), batch=st.integers(1, 3), seq_len=st.integers(1, 7),
       tail=st.sampled_from(["drop", "pad"]), seq_len2=st.integers(1, 7), data=st.data())
def test_a_concat_cutter_state_by_binary_search_is_the_replay(case, consumers, batch, seq_len, tail, seq_len2,
                                                              data) -> None:
    """TB25: after any number of blocks (padding blocks past the work included), the state of a
    concat consumer found by binary search over its pool is the state its cutter reaches, at
    level 0 (the stream index) and over an elastic remainder (a pool of pieces)."""
    sizes, lengths, params, extra, _ = case
    index = EpochIndex.windowed(sizes, single_params(params), order_plan(sizes, params), ArrayLengths(lengths),
                                extra, "concat")
    options = BlockOptions(seq_len)
    split = split_work(index, consumers, batch, options, tail)
    states = []
    for work in split.consumers:
        for k in range(work.num_blocks + 1):
            assert consumer_state(work, options, k) == _replayed(work, options, k)
        states.append(consumer_state(work, options, data.draw(st.integers(0, work.num_blocks // batch)) * batch))
    pool = remainder_pool(split.consumers, states, options)
    options2 = BlockOptions(seq_len2)
    for work in split_work(pool, consumers, batch, options2, tail).consumers:
        for k in range(work.num_blocks + 1):
            assert consumer_state(work, options2, k) == _replayed(work, options2, k)


def _reference_needs(pieces, positions, next_doc):
    """The documents read in first-need order with their last use, one piece at a time (TB12)."""
    order, last = [], {}
    for i, p in enumerate(pieces):
        wanted = [p.doc_index]
        if next_doc is not None and p.stop == positions[p.doc_index] and next_doc[p.doc_index] >= 0:
            wanted.append(int(next_doc[p.doc_index]))
        for d in wanted:
            if d not in last:
                order.append(d)
            last[d] = i
    return [(d, last[d]) for d in order]


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=14), data=st.data())
def test_document_needs_of_a_work_in_document_order_is_the_reference(lengths, data) -> None:
    """The shortcut for a work of one piece per document in order (a level-0 work) gives what
    the general path gives, cut anywhere, with and without concat labels."""
    positions = np.array(lengths, dtype=np.int64)
    whole = Pieces.whole(positions)
    a = data.draw(st.integers(0, whole.total))
    work = whole.cut(a, data.draw(st.integers(a, whole.total)))
    for nxt in (next_nonempty(positions), None):
        assert document_needs(work, positions, nxt) == _reference_needs(list(work), positions, nxt)
    scattered = Pieces.of([Piece(d, s, e) for d, s, e in reversed(list(work))])
    nxt = next_nonempty(positions)
    assert document_needs(scattered, positions, nxt) == _reference_needs(list(scattered), positions, nxt)


class _Synthetic:
    """Document ``d``'s tokens from its global sample index (the same whoever asks)."""

    def __init__(self, samples, lengths) -> None:
        self.samples, self.lengths = samples, lengths

    def __getitem__(self, d: int) -> np.ndarray:
        g = int(self.samples[d])
        return (np.arange(int(self.lengths[g])) + 1000 * g + 7).astype(np.int32)


@settings(max_examples=60, deadline=None)
@given(case=epochs(), consumers=st.integers(1, 4), seq_len=st.integers(1, 6), tail=st.sampled_from(["drop", "pad"]),
       mask_starts=st.booleans())
def test_a_consumer_over_its_own_documents_cuts_the_rows_of_the_whole_epoch_arrays(case, consumers, seq_len, tail,
                                                                                   mask_starts) -> None:
    """TB25-TB26: what a consumer reads (documents, last uses, the TB23 neighbours' lengths)
    and the rows it cuts from arrays over its own document range equal those from arrays over
    the whole epoch, in both modes."""
    sizes, lengths, params, extra, mode = case
    blocks = TokenBlocks(seq_len, mode=mode, eos_id=9 if extra else None, bos_id=8 if extra == 2 else None,
                         mask_doc_starts=mask_starts)
    interleave = 2 if mask_starts and params.shuffle else 1  # lanes (P13): the index over arrays
    plan = build_token_plan(sizes, lengths, PlanParams(**{**params.to_dict(), "world_size": consumers,
                                                          "batch_size": 2, "tail": tail, "interleave": interleave}),
                            blocks)
    samples = epoch_order(plan.order)
    segments, positions = plan.segments, plan.positions
    docs = _Synthetic(samples, lengths)
    options = TokenOptions(eos_id=blocks.eos_id, bos_id=blocks.bos_id, mask_doc_starts=mask_starts)
    for c, work in enumerate(plan.level.split.consumers):
        view = consumer_view(plan, c, blocks.extra_tokens)
        nxt = next_nonempty(segments) if mode == "concat" else None
        assert view.needs == document_needs(work.pieces, positions, nxt)
        for d, _ in view.needs:
            assert view.samples[d] == samples[d] and view.segments[d] == segments[d]
        assert all(view.positions.lo <= d < view.positions.hi for d, _ in view.needs)
        lo, hi = view.positions.lo, view.positions.hi
        if view.needs:  # TB23: the empty neighbours are inside the range
            assert lo == 0 or positions[lo - 1] > 0
            assert hi == len(positions) or positions[hi] > 0
        local = TokenDocs.from_lengths(_Synthetic(DocArray(0, samples), lengths), view.segments, options, None,
                                       view.next_doc)
        full = TokenDocs.from_lengths(docs, segments, options)
        cutter = BlockCutter(work.pieces, plan.level.options)
        cut = [b for b in iter(cutter.next_block, None)]
        if cut:
            got = assemble(cut, local, seq_len, mode)
            want = assemble(cut, full, seq_len, mode)
            for key in want:
                assert np.array_equal(got[key], want[key]), key


def test_periodic_lengths_totals_are_the_running_sums() -> None:
    table = np.array([0, 3, 1, 0, 7, 2], dtype=np.int64)
    source = PeriodicLengths(40, table)
    lengths = table[np.arange(40) % len(table)]
    points = np.arange(41)
    for got, values in zip(source.prefix(points), (lengths, lengths >= 1, lengths >= 2), strict=True):
        assert np.array_equal(got, np.concatenate([[0], np.cumsum(values)])[points])
    assert np.array_equal(source.take(np.array([0, 7, 39])), lengths[[0, 7, 39]])
