"""Window/Span reader contract: specs/partition.md step 4 (P4, P9)."""

from __future__ import annotations

import numpy as np

from shardkit.plan import PlanParams, Span, Window, build_plan, global_index, shard_offsets


def test_global_index_matches_window_indices() -> None:
    """P9: decode spans in order, emit decode_list[order[i]]; global_index per span sample."""
    sizes = [4, 0, 6, 5]
    offsets = shard_offsets(sizes)
    assert offsets.tolist() == [0, 4, 4, 10, 15]
    plan = build_plan(sizes, PlanParams(world_size=1, batch_size=3, shuffle_window=4))
    for window in plan.consumer_windows(0, 5):
        decoded = [global_index(offsets, s, i) for s in window.spans for i in range(s.num_samples)]
        assert window.num_decoded == len(decoded)
        assert np.array_equal(np.asarray(decoded)[window.order], window.global_indices(offsets))


def test_padded_mask_follows_spans() -> None:
    """P4: a window's pad flags come from its spans, in output order."""
    window = Window((Span(3, 0, 2), Span(0, 5, 6, padded=True)), np.array([2, 0, 1]))
    assert window.padded_mask().tolist() == [True, False, False]
    assert window.num_samples == 3 and window.num_decoded == 3
    assert window.global_indices(shard_offsets([10, 0, 0, 7])).tolist() == [5, 10, 11]
