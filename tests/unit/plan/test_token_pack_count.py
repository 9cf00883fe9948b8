"""The pack block count without cutting (specs/token-blocks.md TB27) against the cutter."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan.token_blocks import BlockCutter, BlockOptions, Piece
from shardkit.plan.token_pack_count import count_pack_blocks


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
