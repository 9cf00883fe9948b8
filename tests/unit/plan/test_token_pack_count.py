"""The pack block count without cutting (specs/token-blocks.md TB27) against the cutter."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanParams
from shardkit.plan.tokens.blocks import BlockCutter, BlockOptions, Piece
from shardkit.plan.tokens.config import TokenBlocks
from shardkit.plan.tokens.pack_count import count_pack_blocks
from shardkit.plan.tokens.plan import build_token_plan


@settings(max_examples=400, deadline=None)
@given(lengths=st.lists(st.one_of(st.integers(1, 12), st.integers(0, 40)), max_size=40), seq_len=st.integers(1, 12),
       open_blocks=st.integers(1, 5), fit=st.sampled_from(["best", "first"]),
       long_docs=st.sampled_from(["split", "truncate"]), offset=st.integers(0, 3))
def test_the_pack_count_is_the_number_of_blocks_the_cutter_yields(lengths, seq_len, open_blocks, fit, long_docs,
                                                                 offset) -> None:
    """TB27: any lengths (long ones split or truncated, empty pieces too), seq_len, open
    blocks and fit: the count is the cutter's, so TB6's step count is unchanged."""
    options = BlockOptions(seq_len, "pack", fit, long_docs, open_blocks)
    everything = [Piece(d, offset, offset + n) for d, n in enumerate(lengths)]
    for pieces in (everything, [p for p in everything if p.length]):  # what pools hold: no empty piece
        cutter, want = BlockCutter(pieces, options), 0
        while cutter.next_block() is not None:
            want += 1
        assert count_pack_blocks(pieces, options) == want


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=40), consumers=st.integers(1, 4),
       seq_len=st.integers(2, 12), tail=st.sampled_from(["drop", "pad"]))
def test_a_pack_plan_given_its_count_is_the_plan_that_counted(lengths, consumers, seq_len, tail) -> None:
    """TB27: a worker given its loader's step count builds the same plan without counting:
    same works, steps, states after every block, and (drop tail) the same dropped pieces."""
    sizes = np.array([len(lengths)], dtype=np.int64)
    blocks = TokenBlocks(seq_len, mode="pack", eos_id=1)
    params = PlanParams(seed=1, world_size=consumers, batch_size=2, tail=tail, shuffle_window=4)
    counted = build_token_plan(sizes, np.array(lengths), params, blocks)
    given_count = build_token_plan(sizes, np.array(lengths), params, blocks,
                                   num_blocks=counted.level.split.num_blocks)
    assert given_count.level.split.num_blocks == counted.level.split.num_blocks
    assert given_count.dropped == counted.dropped
    for c in range(counted.num_consumers):
        assert given_count.level.split.consumers[c].pieces == counted.level.split.consumers[c].pieces
        for k in range(counted.level.split.num_blocks + 1):
            assert given_count.consumer_state(c, k) == counted.consumer_state(c, k)
