"""Token plans at scale: 10**9 documents, 10**5 shards, 4,096 consumers (specs/token-blocks.md
TB25-TB26), as test_plan_scale.py does for the sample plan. A synthetic length index (closed-form
totals) stands in for the 4 GB one. Asserts counts and a memory ceiling, never wall time
(the time is ``python -m benchmarks.token_plan_scale``)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from shardkit.plan import PlanParams
from shardkit.plan.tokens.blocks import BlockCutter
from shardkit.plan.tokens.config import TokenBlocks
from shardkit.plan.tokens.consumer import consumer_view
from shardkit.plan.tokens.lengths_source import PeriodicLengths
from shardkit.plan.tokens.plan import build_token_plan
from shardkit.plan.tokens.rows import TokenDocs, assemble

NUM_DOCS, NUM_SHARDS, MIB = 10**9, 100_000, 1 << 20
SEQ_LEN, BATCH = 2048, 8


def synthetic_table() -> np.ndarray:
    """4,096 log-normal lengths (median 600), every 17th document empty, every 31st one token."""
    table = np.random.default_rng(0).lognormal(np.log(600), 1.0, 4096).astype(np.int64) + 1
    table[::17], table[5::31] = 0, 1
    return table


def test_a_concat_plan_of_a_billion_documents_plans_and_cuts_a_consumer_in_bounded_memory() -> None:
    """TB25: the plan of 4,096 consumers, the last consumer's documents and first batch, and
    cutter states mid-epoch, with no per-document array over the epoch: traced memory stays
    under 100 MiB (the old plan held ~56 bytes per document: 56 GB here)."""
    sizes = np.full(NUM_SHARDS, NUM_DOCS // NUM_SHARDS, dtype=np.int64)
    table = synthetic_table()
    lengths = PeriodicLengths(NUM_DOCS, table)
    blocks = TokenBlocks(SEQ_LEN, eos_id=0)
    params = PlanParams(seed=3, epoch=1, world_size=512, num_workers=8, batch_size=BATCH)
    tracemalloc.start()
    try:
        plan = build_token_plan(sizes, lengths, params, blocks)
        full, part = divmod(NUM_DOCS, len(table))  # tokens + one EOS per non-empty document
        total = full * int(table.sum() + (table > 0).sum()) + int(table[:part].sum() + (table[:part] > 0).sum())
        assert plan.index.total == total and plan.num_consumers == 4096
        assert plan.level.split.num_blocks == total // (4096 * BATCH * SEQ_LEN) * BATCH  # TB6
        last = plan.num_consumers - 1
        view = consumer_view(plan, last, blocks.extra_tokens)
        span = plan.level.split.num_blocks * SEQ_LEN
        assert sum(p.length for p in view.pieces) == span  # exactly its range of the stream (TB6)

        class Docs:
            def __getitem__(self, d: int) -> np.ndarray:
                return np.full(int(view.num_tokens[d]), 5, dtype=np.int32)

        rows = TokenDocs.from_lengths(Docs(), view.segments, blocks.token_options(), None, view.next_doc)
        cutter = BlockCutter(view.pieces, plan.level.options)
        first = [cutter.next_block() for _ in range(BATCH)]
        batch = assemble(first, rows, SEQ_LEN, "concat")  # type: ignore[arg-type]
        assert batch["input_ids"].shape == (BATCH, SEQ_LEN) and int(batch["num_padding"]) == 0
        middle = plan.level.split.num_blocks // 2 // BATCH * BATCH
        state = plan.consumer_state(last, middle)
        assert state["doc_index"] >= 0 and state["carry"] == [] and state["blocks"] == middle
        assert plan.consumer_state(last, plan.level.split.num_blocks)["doc_index"] == -1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * MIB, f"peak traced memory {peak / MIB:.0f} MiB"
