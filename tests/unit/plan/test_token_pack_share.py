"""A pack count shared among ranks (specs/token-blocks.md TB29): each rank counting only its own
consumers and agreeing on the least / most count gives the plan that counts every consumer."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanParams
from shardkit.plan.tokens.config import TokenBlocks
from shardkit.plan.tokens.pack_count import CountShare
from shardkit.plan.tokens.plan import build_token_plan


@settings(max_examples=120, deadline=None)
@given(lengths=st.lists(st.sampled_from([0, 1, 2, 3, 5, 8, 13, 30]), min_size=1, max_size=40),
       shards=st.integers(1, 4), ranks=st.integers(2, 4), workers=st.integers(0, 3), batch=st.integers(1, 3),
       seq_len=st.integers(2, 12), tail=st.sampled_from(["drop", "pad"]), open_blocks=st.integers(1, 4),
       long_docs=st.sampled_from(["split", "truncate"]), window=st.integers(1, 8), seed=st.integers(0, 3))
def test_ranks_counting_their_own_consumers_agree_on_the_plan_that_counts_all(
        lengths, shards, ranks, workers, batch, seq_len, tail, open_blocks, long_docs, window, seed) -> None:
    """TB29: every rank's share (its ``W`` consumers), agreed by MIN (drop) / MAX (pad), gives
    TB6's ``K`` of the plan counting all, and the same works and start states."""
    sizes = np.array([len(lengths) // shards] * (shards - 1) + [len(lengths) - len(lengths) // shards * (shards - 1)])
    tokens = TokenBlocks(seq_len, mode="pack", eos_id=2, open_blocks=open_blocks, long_docs=long_docs)
    params = PlanParams(seed=seed, world_size=ranks, num_workers=workers, batch_size=batch, tail=tail,
                        shuffle_window=window)
    lengths_array = np.array(lengths, dtype=np.int64)
    whole = build_token_plan(sizes, lengths_array, params, tokens)
    width = max(workers, 1)
    values: list[int] = []  # each rank's own value, as it would enter the all-reduce
    for rank in range(ranks):
        share = CountShare(range(rank * width, (rank + 1) * width), lambda value, op: values.append(value) or value)
        build_token_plan(sizes, lengths_array, params, tokens, share=share)
    agreed = min(values) if tail == "drop" else max(values)
    for rank in range(ranks):
        share = CountShare(range(rank * width, (rank + 1) * width), lambda value, op: agreed)
        plan = build_token_plan(sizes, lengths_array, params, tokens, share=share)
        assert plan.level.split.num_blocks == whole.level.split.num_blocks
        assert plan.steps_per_rank == whole.steps_per_rank
        for c in range(rank * width, (rank + 1) * width):
            assert list(plan.level.split.consumers[c].pieces) == list(whole.level.split.consumers[c].pieces)
            assert plan.start_state(c) == whole.start_state(c)
        assert list(plan.dropped) == list(whole.dropped)
