"""The global-order token plan (specs/token-blocks.md TB30-TB33), pure: every consumer's blocks,
dealt to its rank's workers as a DataLoader hands them on (P30), rebuild the same global batches
for any ranks R dividing B_g, workers and batches per transfer; each is the stream's next B_g
blocks of L positions; every position of the stream is in exactly one block but the drop tail;
a state after G global batches resumes on any topology with the later global batches bit for
bit, and with another B_g or seq_len every position is still consumed once over the chain."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.loader.token_batch import batch_blocks
from shardkit.plan import PlanParams
from shardkit.plan.global_order.order import units_below
from shardkit.plan.tokens.blocks import Block
from shardkit.plan.tokens.global_blocks import GlobalTokenPlan, build_global_token_plan, global_token_state

Blocks = list[tuple[tuple[int, int, int], ...]]


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def shapes() -> st.SearchStrategy[tuple[int, int, int]]:
    """(B_g, R_a, R_b): a global batch size and two rank counts dividing it."""
    return st.sampled_from([1, 2, 4, 6]).flatmap(
        lambda g: st.tuples(st.just(g), st.sampled_from(divisors(g)), st.sampled_from(divisors(g))))


def plan_of(lengths: list[int], shard: int, tokens: sk.TokenBlocks, global_batch: int, ranks: int, workers: int,
            group: int, tail: str, seed: int, resume: dict[str, Any] | None = None) -> GlobalTokenPlan:
    sizes = [min(shard, len(lengths) - i) for i in range(0, len(lengths), shard)]
    params = PlanParams(seed=seed, world_size=ranks, num_workers=workers, batch_size=global_batch // ranks,
                        tail=tail, shuffle_window=4, order="global")
    return build_global_token_plan(sizes, np.asarray(lengths), params, tokens, resume, group)


def as_tuples(block: Block) -> tuple[tuple[int, int, int], ...]:
    return tuple((int(p.doc_index), int(p.start), int(p.stop)) for p in block.pieces)


def global_batches(plan: GlobalTokenPlan) -> list[Blocks]:
    """Each consumer's batches, its j-th put where P30 deals it; a step is the ranks' slices."""
    params = plan.params
    slices: dict[int, dict[int, Blocks]] = collections.defaultdict(dict)
    for consumer in range(plan.num_consumers):
        rank, _ = plan.rank_worker(consumer)
        cut = batch_blocks(plan.consumer_work(consumer), plan.options, params.batch_size)
        for j, (blocks, _) in enumerate(cut):
            slices[plan.global_batch_index(consumer, j)][rank] = [as_tuples(b) for b in blocks]
    assert sorted(slices) == list(range(plan.steps_per_rank))
    return [sum((slices[g][r] for r in range(params.world_size)), []) for g in range(plan.steps_per_rank)]


def offsets_after(plan: GlobalTokenPlan, received: int) -> list[int]:
    workers = plan.params.workers_per_rank
    return [units_below(received, c % workers, workers, plan.group) * plan.params.batch_size
            for c in range(plan.num_consumers)]


def positions(batches: list[Blocks]) -> collections.Counter[tuple[int, int]]:
    return collections.Counter((d, o) for batch in batches for block in batch for d, s, e in block
                               for o in range(s, e))


CORPUS = st.lists(st.integers(0, 30), min_size=1, max_size=40)
TOKENS = st.builds(lambda seq_len, eos: sk.TokenBlocks(seq_len, eos_id=eos), st.integers(1, 9),
                   st.sampled_from([None, 2]))


@settings(max_examples=150, deadline=None)
@given(CORPUS, st.integers(1, 7), TOKENS, shapes(), st.integers(0, 3), st.integers(1, 3),
       st.sampled_from(["drop", "pad"]), st.integers(0, 99))
def test_global_batches_are_the_streams_blocks_on_every_topology(
        lengths: list[int], shard: int, tokens: sk.TokenBlocks, shape: tuple[int, int, int], workers: int,
        group: int, tail: str, seed: int) -> None:
    """TB30, TB31, TB32: R ranks × W workers × k per transfer rebuild the one-consumer plan's
    global batches; global batch g is blocks g·B_g … of the stream (index.cut of L positions
    each, padding only past the stream's end, pad tail); each position once, the rest dropped."""
    global_batch, ranks, _ = shape
    one = plan_of(lengths, shard, tokens, global_batch, 1, 0, 1, tail, seed)
    reference = global_batches(one)
    many = plan_of(lengths, shard, tokens, global_batch, ranks, workers, group, tail, seed)
    assert global_batches(many) == reference
    assert many.steps_per_rank == len(reference)
    for c in range(many.num_consumers):
        assert many.num_batches(c) == units_below(len(reference), c % max(workers, 1), max(workers, 1), group)
    length, total = tokens.seq_len, one.index.total
    for g, batch in enumerate(reference):
        for i, block in enumerate(batch):
            lo = (g * global_batch + i) * length
            assert block == tuple((int(d), int(s), int(e)) for d, s, e in one.index.cut(lo, lo + length))
    seen = positions(reference)
    dropped = collections.Counter((int(p.doc_index), o) for p in one.dropped for o in range(p.start, p.stop))
    assert max(seen.values(), default=1) == 1 and not seen & dropped
    assert sum((seen + dropped).values()) == total == sum(one.index.cut(0, total).stop - one.index.cut(0, total).start)
    assert one.num_dropped == sum(dropped.values()) < (global_batch * length if tail == "drop" else 1)


@settings(max_examples=150, deadline=None)
@given(CORPUS, TOKENS, shapes(), st.integers(0, 3), st.integers(0, 3), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from(["drop", "pad"]), st.floats(0, 1), st.integers(0, 99))
def test_a_state_resumes_the_later_global_batches_on_any_topology(
        lengths: list[int], tokens: sk.TokenBlocks, shape: tuple[int, int, int], workers_a: int, workers_b: int,
        group_a: int, group_b: int, tail: str, kill: float, seed: int) -> None:
    """TB33: the state after G global batches (from the consumers' offsets, P30's deal) is the
    stream position G·B_g·L; a plan from it on R_b ranks, other workers and transfers yields the
    uninterrupted run's global batches G … bit for bit."""
    global_batch, ranks_a, ranks_b = shape
    reference = global_batches(plan_of(lengths, 3, tokens, global_batch, 1, 0, 1, tail, seed))
    a = plan_of(lengths, 3, tokens, global_batch, ranks_a, workers_a, group_a, tail, seed)
    done = int(kill * a.steps_per_rank)
    state = global_token_state(a, offsets_after(a, done), "fp")
    assert state["position"] == min(done * global_batch * tokens.seq_len, a.index.total)
    b = plan_of(lengths, 3, tokens, global_batch, ranks_b, workers_b, group_b, tail, seed, state)
    assert global_batches(b) == reference[done:]


@settings(max_examples=150, deadline=None)
@given(CORPUS, st.integers(1, 9), st.integers(1, 9), st.integers(1, 4), st.integers(1, 4), st.floats(0, 1),
       st.integers(0, 99))
def test_another_global_batch_or_seq_len_recuts_the_rest_of_the_stream(
        lengths: list[int], len_a: int, len_b: int, batch_a: int, batch_b: int, kill: float, seed: int) -> None:
    """TB33: a resume with another B_g or seq_len cuts the stream from the saved position into
    the new blocks: over the chain every position is received once but the last plan's tail."""
    tok_a, tok_b = sk.TokenBlocks(len_a, eos_id=2), sk.TokenBlocks(len_b, eos_id=2)
    a = plan_of(lengths, 4, tok_a, batch_a, 1, 2, 1, "drop", seed)
    done = int(kill * a.steps_per_rank)
    state = global_token_state(a, offsets_after(a, done), "fp")
    b = plan_of(lengths, 4, tok_b, batch_b, 1, 0, 1, "drop", seed, state)
    assert b.start == state["position"]
    chain = positions(global_batches(a)[:done]) + positions(global_batches(b))
    dropped = collections.Counter((int(p.doc_index), o) for p in b.dropped for o in range(p.start, p.stop))
    assert max(chain.values(), default=1) == 1 and not chain & dropped
    assert sum((chain + dropped).values()) == a.index.total
