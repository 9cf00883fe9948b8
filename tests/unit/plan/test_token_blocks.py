"""Token blocks (specs/token-blocks.md): every position of every document consumed exactly once
across kills and elastic resumes (TB5-TB8), equal steps (TB6), pack padding (TB3)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError, StateError
from shardkit.plan.tokens.blocks import Block, BlockCutter, BlockOptions, Piece, epoch_pieces, num_positions
from shardkit.plan.tokens.pool import WorkSplit, block_pieces, remainder_pool, split_work


def _pairs(pieces: list[Piece]) -> list[tuple[int, int]]:
    return [(p.doc_index, o) for p in pieces for o in range(p.start, p.stop)]


def _run_level(split: WorkSplit, options: BlockOptions, kills: list[int] | None, batch: int):
    """Run every consumer to its kill batch (all blocks when ``kills`` is None).

    Returns (consumed blocks, JSON round-tripped states at the consumed boundary)."""
    consumed: list[Block] = []
    states = []
    for c, work in enumerate(split.consumers):
        stop = work.num_blocks if kills is None else min(kills[c % len(kills)] * batch, work.num_blocks)
        cutter = BlockCutter(work.pieces, options)
        for _ in range(stop):
            block = cutter.next_block()
            consumed.append(block if block is not None else Block((), options.seq_len))
        states.append(json.loads(json.dumps({**cutter.to_dict(), "blocks": stop})))
    return consumed, states


def _accounted(blocks: list[Block], split_dropped: list[Piece]) -> tuple[list, list]:
    real = [pair for b in blocks for pair in _pairs(list(b.pieces))]
    lost = [pair for b in blocks for pair in _pairs(list(b.truncated))] + _pairs(split_dropped)
    return real, lost


levels = st.tuples(
    st.integers(1, 4),  # consumers
    st.integers(1, 3),  # batch size
    st.integers(1, 9),  # seq_len
    st.lists(st.integers(0, 4), min_size=1, max_size=4),  # kill batch per consumer
)


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), max_size=25),
    mode=st.sampled_from(["concat", "pack"]),
    fit=st.sampled_from(["best", "first"]),
    long_docs=st.sampled_from(["split", "truncate"]),
    tail=st.sampled_from(["pad", "drop"]),
    open_blocks=st.integers(1, 4),
    chain=st.lists(levels, min_size=1, max_size=3),
)
def test_every_position_once_across_kills_and_elastic_resumes(lengths, mode, fit, long_docs, tail, open_blocks, chain):
    """TB5, TB7: the consumed positions, plus those reported dropped (drop tail) or truncated,
    are exactly the epoch's positions, each once; no position is consumed twice, through a
    chain of kills where consumers, batch size and seq_len change (TB8)."""
    positions = num_positions(np.array(lengths), mode)
    pool = epoch_pieces(positions)
    consumed: list[tuple[int, int]] = []
    lost: list[tuple[int, int]] = []
    for i, (consumers, batch, seq_len, kills) in enumerate(chain):
        options = BlockOptions(seq_len, mode, fit, long_docs, open_blocks)
        split = split_work(pool, consumers, batch, options, tail)
        assert {w.num_blocks for w in split.consumers} == {split.num_blocks}  # TB6 equal steps
        assert split.num_blocks % batch == 0
        last = i == len(chain) - 1
        blocks, states = _run_level(split, options, None if last else kills, batch)
        assert all(b.num_tokens + b.num_padding == seq_len for b in blocks)
        real, gone = _accounted(blocks, split.dropped)
        consumed += real
        lost += gone
        pool = remainder_pool(split.consumers, states, options)
    assert pool == []
    assert len(set(consumed)) == len(consumed), "a position was consumed twice"
    expected = Counter((d, o) for d, n in enumerate(positions) for o in range(n))
    assert Counter(consumed) + Counter(lost) == expected
    if tail == "pad" and (mode == "concat" or long_docs == "split"):
        assert lost == []  # nothing dropped or truncated: every position consumed (TB5)


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), max_size=25),
    mode=st.sampled_from(["concat", "pack"]),
    seq_len=st.integers(1, 9),
    kill=st.integers(0, 40),
)
def test_resume_from_state_yields_the_same_blocks_as_an_uninterrupted_run(lengths, mode, seq_len, kill):
    """TB5: same topology, the cutter restored from its serialised state continues identically."""
    options = BlockOptions(seq_len, mode, open_blocks=3)
    pieces = epoch_pieces(num_positions(np.array(lengths), mode))
    whole = []
    cutter = BlockCutter(pieces, options)
    while (block := cutter.next_block()) is not None:
        whole.append(block)
    cutter = BlockCutter(pieces, options)
    for _ in range(min(kill, len(whole))):
        cutter.next_block()
    resumed = BlockCutter.from_dict(pieces, options, json.loads(json.dumps(cutter.to_dict())))
    rest = []
    while (block := resumed.next_block()) is not None:
        rest.append(block)
    assert rest == whole[min(kill, len(whole)):]


@settings(max_examples=100, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=30), seq_len=st.integers(1, 12))
def test_pack_never_splits_a_document_that_fits(lengths, seq_len):
    """TB3: a document with at most seq_len positions lies whole in one block."""
    options = BlockOptions(seq_len, "pack", open_blocks=2)
    positions = num_positions(np.array(lengths), "pack")
    cutter = BlockCutter(epoch_pieces(positions), options)
    seen: Counter[int] = Counter()
    while (block := cutter.next_block()) is not None:
        seen.update(p.doc_index for p in block.pieces)
    for d, n in enumerate(positions):
        if 0 < n <= seq_len:
            assert seen[d] == 1


def test_pack_padding_on_a_log_normal_mix_is_under_five_percent():
    """TB3: best-fit with 16 open blocks, median 600 tokens, seq_len 2048 (measured ~1.1%)."""
    rng = np.random.default_rng(0)
    lengths = np.maximum(1, np.round(rng.lognormal(np.log(600), 1.0, 5000))).astype(np.int64) + 1
    cutter = BlockCutter(epoch_pieces(num_positions(lengths, "pack")), BlockOptions(2048, "pack"))
    blocks = []
    while (block := cutter.next_block()) is not None:
        blocks.append(block)
    padding = sum(b.num_padding for b in blocks) / (len(blocks) * 2048)
    assert padding <= 0.05


def test_concat_cuts_a_worked_example():
    """TB2: documents of 3, 0 and 5 positions, seq_len 4: blocks run across documents."""
    cutter = BlockCutter(epoch_pieces([3, 0, 5]), BlockOptions(4, "concat"))
    blocks = [cutter.next_block(), cutter.next_block(), cutter.next_block()]
    assert blocks[0] == Block((Piece(0, 0, 3), Piece(2, 0, 1)), 0)
    assert blocks[1] == Block((Piece(2, 1, 5),), 0)
    assert blocks[2] is None


def test_a_state_from_other_work_is_refused():
    options = BlockOptions(4)
    cutter = BlockCutter([Piece(0, 0, 9)], options)
    cutter.next_block()
    with pytest.raises(StateError, match="document 0, offset 4"):
        BlockCutter.from_dict([Piece(1, 0, 9)], options, cutter.to_dict())


@pytest.mark.parametrize("bad", [{"seq_len": 0}, {"seq_len": 4, "mode": "stream"}, {"seq_len": 4, "fit": "worst"}])
def test_bad_options_are_refused(bad):
    with pytest.raises(PlanError):
        BlockOptions(**bad)


def test_block_pieces_keep_truncated_positions_for_the_pool():
    block = Block((Piece(0, 0, 4),), 0, (Piece(0, 4, 9),))
    assert block_pieces(block) == [Piece(0, 0, 4), Piece(0, 4, 9)]
