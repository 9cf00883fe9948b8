"""Consumers report their cutter state with each batch (specs/token-blocks.md TB28): the
reported state, through its row of ints, is the state a replay of the offset gives, and a
loader state's ``tokens`` part made from reports equals the one computed without them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import StateError
from shardkit.loader.token_batch import batch_blocks
from shardkit.plan import PlanParams
from shardkit.plan.tokens.config import TokenBlocks
from shardkit.plan.tokens.cursor import cursor_row, cursor_state, row_length
from shardkit.plan.tokens.plan import build_token_plan
from tests.helpers.token_reference import replayed_state


@st.composite
def plans(draw: st.DrawFn):
    sizes = np.array(draw(st.lists(st.integers(0, 9), min_size=1, max_size=5)), dtype=np.int64)
    lengths = np.array(draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 9, 17]), min_size=int(sizes.sum()),
                                     max_size=int(sizes.sum()))), dtype=np.int64)
    params = PlanParams(seed=draw(st.integers(0, 3)), shuffle=draw(st.booleans()),
                        shuffle_window=draw(st.integers(1, 6)), world_size=draw(st.integers(1, 3)),
                        num_workers=draw(st.integers(0, 2)), batch_size=draw(st.integers(1, 3)),
                        tail=draw(st.sampled_from(["drop", "pad"])))
    tokens = TokenBlocks(draw(st.integers(1, 9)), mode=draw(st.sampled_from(["concat", "pack"])),
                         eos_id=draw(st.sampled_from([None, 2])), bos_id=draw(st.sampled_from([None, 1])),
                         open_blocks=draw(st.integers(1, 4)), long_docs=draw(st.sampled_from(["split", "truncate"])))
    return sizes, lengths, params, tokens


def _reports(plan, consumer: int) -> dict[int, dict]:
    """What consumer ``consumer`` reports at each batch boundary, as the worker does (TB28)."""
    work, options = plan.level.split.consumers[consumer], plan.level.options
    out, done = {}, 0
    for blocks, cutter in batch_blocks(work, options, plan.params.batch_size):
        done += len(blocks)
        row = cutter.cursor_row(done)  # what the loader sends, written from the cutter directly
        assert row == cursor_row({**cutter.to_dict(), "blocks": done})
        assert all(type(x) is int for x in row)  # plain ints: the row travels in the batch's meta
        assert row_length(row + (0, 0)) == len(row)  # a padded gather row
        out[done] = cursor_state(row)
    return out


@settings(max_examples=150, deadline=None)
@given(case=plans(), data=st.data())
def test_a_reported_cutter_state_is_the_replay_of_its_offset(case, data) -> None:
    """TB28 (TB5, TB13): at every batch boundary of every consumer, concat and pack, drop and
    pad tails, the state the consumer reports is the replay of its offset and the plan's own
    state; a ``tokens`` part from any mix of reports equals the one computed without them."""
    sizes, lengths, params, tokens = case
    plan = build_token_plan(sizes, lengths, params, tokens)
    reports = [_reports(plan, c) for c in range(plan.num_consumers)]
    for c, by_offset in enumerate(reports):
        for blocks, state in by_offset.items():
            work = plan.level.split.consumers[c]
            assert state == replayed_state(work, plan.level.options, blocks) == plan.consumer_state(c, blocks)
    batch = params.batch_size
    offsets = [data.draw(st.integers(0, plan.num_batches(c)), label=f"batches {c}") * batch
               for c in range(plan.num_consumers)]
    known = {c: reports[c][k] for c, k in enumerate(offsets) if k in reports[c] and data.draw(st.booleans())}
    assert plan.tokens_part(tokens, offsets, [], known) == plan.tokens_part(tokens, offsets, [])


def test_a_report_at_another_offset_is_not_taken() -> None:
    """A report is used only for the offset it was made at (a snapshot behind the boundary)."""
    sizes, lengths = np.array([6]), np.array([5, 0, 9, 3, 7, 2])
    plan = build_token_plan(sizes, lengths, PlanParams(seed=1, batch_size=1), TokenBlocks(4, eos_id=2))
    wrong = {**plan.consumer_state(0, 2), "blocks": 3}
    assert plan.tokens_part(TokenBlocks(4, eos_id=2), [2], [], {0: wrong}) == \
        plan.tokens_part(TokenBlocks(4, eos_id=2), [2], [])


def test_a_short_cursor_row_is_refused() -> None:
    with pytest.raises(StateError, match="open block 0"):
        cursor_state((4, 0, 1, 0, 1, 2, 0, 0, 3))
    with pytest.raises(StateError, match="at least 5"):
        cursor_state((1, 2))
