"""Token-block plans at scale (specs/token-blocks.md TB25-TB26): time and memory per process.

    python -m benchmarks.token_plan_scale [--case scale|state|pack] [--docs N] [--ranks R] [--code PATH] \
        [--out benchmarks/results/token_plan_scale.jsonl]

Each case runs in a fresh process (``--code``: the tree whose ``shardkit`` it imports, e.g. an
older checkout, to measure before/after) and prints one JSON line:

- ``scale``: plan ``--docs`` documents (default 10**9) in 10**5 shards for 512 ranks × 8 workers
  (4,096 consumers), concat, seq_len 2,048, batch 8, from a synthetic length index (closed-form
  totals: no 4 GB array; an older tree gets the lengths as an array, so use a smaller ``--docs``
  there), then the last consumer's documents and first batch of rows from synthetic tokens:
  wall seconds and peak RSS growth (``VmHWM`` after imports); then the ``tokens`` part of
  ``state_dict()`` for all 4,096 consumers near the end of their blocks, computed from the
  offsets (``state_computed_s``, ``state_computed_again_s``) and, in a tree whose consumers
  report their cutter states (TB28), from the reports (``state_reported_s``).
- ``state``: one consumer of ``--docs`` documents (default 10**6), concat; the ``tokens`` part
  of the loader state (``TokenPlan.tokens_part``) at 90% of the epoch, median of 5 calls.
- ``pack``: ``--docs`` documents (default 660,000), pack mode, 2 consumers (W=2), seq_len
  2,048: the plan and consumer 0's first batch of blocks, as the loader's process does, then as
  a worker does (given the loader's count, TB27; an older tree counts again), and the two summed:
  a worker's first batch comes after its loader planned. ``--ranks R``: the loader is rank 0 of
  R ranks × 2 workers; a tree that shares the count (TB29) counts only rank 0's consumers.
- ``global``: ``--docs`` documents (default 660,000), concat in ``order="global"`` (TB30-TB34),
  rank 0 of ``--ranks`` ranks × 2 workers, 8 batches per transfer: the plan, then consumer 0's
  work (its block ranges of the whole epoch), its documents' view and first batch of rows, as its
  worker does; peak RSS growth.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

from benchmarks.jsonl import save_rows

MIB = 1 << 20
SEQ_LEN, BATCH = 2048, 8


def _peak_rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _table() -> np.ndarray:
    table = np.random.default_rng(0).lognormal(np.log(600), 1.0, 4096).astype(np.int64) + 1
    table[::17], table[5::31] = 0, 1
    return table


def _lengths(num_docs: int, synthetic: bool) -> Any:
    table = _table()
    if synthetic:
        from shardkit.plan.tokens.lengths_source import PeriodicLengths
        return PeriodicLengths(num_docs, table)
    return table[np.arange(num_docs) % len(table)].astype(np.uint32)


def _first_batch(plan: Any, consumer: int, blocks: Any) -> int:
    """Consumer ``consumer``'s documents and first batch of rows (synthetic tokens); returns its pieces."""
    from shardkit.plan.tokens.blocks import BlockCutter
    from shardkit.plan.tokens.rows import TokenDocs, assemble
    try:
        from shardkit.plan.tokens.consumer import consumer_view
    except ImportError:  # an older tree: whole-epoch arrays
        pieces, segments, nxt = plan.level.split.consumers[consumer].pieces, plan.segments, None
    else:
        view = consumer_view(plan, consumer, blocks.extra_tokens)
        pieces, segments, nxt = view.pieces, view.segments, view.next_doc
    extra = blocks.extra_tokens

    class Docs:
        def __getitem__(self, d: int) -> np.ndarray:
            return np.full(max(int(segments[d]) - extra, 0), 5, dtype=np.int32)

    rows = TokenDocs.from_lengths(Docs(), segments, blocks.token_options(), None, *(() if nxt is None else (nxt,)))
    cutter = BlockCutter(pieces, plan.level.options)
    cut = [cutter.next_block() for _ in range(BATCH)]
    assemble([b for b in cut if b is not None], rows, SEQ_LEN, plan.level.options.mode)
    return len(pieces)


def child(case: str, num_docs: int, ranks: int = 1) -> dict[str, Any]:
    import shardkit.plan  # noqa: F401  (the tree given by --code)
    package = os.path.dirname(sys.modules["shardkit"].__file__ or "")
    synthetic = any(os.path.exists(os.path.join(package, "plan", *parts))  # a tree with LengthSource (TB25)
                    for parts in (("token_lengths_source.py",), ("tokens", "lengths_source.py")))
    if case == "scale":
        return _scale(num_docs, synthetic)
    if case == "state":
        return _state(num_docs)
    if case == "global":
        return _global(num_docs, ranks)
    return _pack(num_docs, ranks)


def _scale(num_docs: int, synthetic: bool) -> dict[str, Any]:
    from shardkit.plan import PlanParams
    from shardkit.plan.tokens.config import TokenBlocks
    from shardkit.plan.tokens.plan import build_token_plan
    base = _peak_rss()
    started = time.perf_counter()
    shards = min(100_000, num_docs)
    sizes = np.full(shards, num_docs // shards, dtype=np.int64)
    sizes[-1] += num_docs - int(sizes.sum())
    lengths = _lengths(num_docs, synthetic)
    blocks = TokenBlocks(SEQ_LEN, eos_id=0)
    planned = time.perf_counter()
    plan = build_token_plan(sizes, lengths, PlanParams(seed=0, world_size=512, num_workers=8, batch_size=BATCH),
                            blocks)
    planned, plan_s = time.perf_counter(), time.perf_counter() - planned
    pieces = _first_batch(plan, plan.num_consumers - 1, blocks)
    row = {"case": "scale", "docs": num_docs, "consumers": plan.num_consumers, "plan_s": plan_s,
           "first_batch_s": time.perf_counter() - planned, "total_s": time.perf_counter() - started,
           "consumer_pieces": pieces, "rss_growth_mib": (_peak_rss() - base) / MIB, "synthetic_lengths": synthetic}
    return {**row, **_state_dict_parts(plan, blocks)}


def _state_dict_parts(plan: Any, blocks: Any) -> dict[str, Any]:
    """The ``tokens`` part of ``state_dict()`` with every consumer near the end of its blocks:
    computed from the offsets (twice, at two boundaries a batch apart), and, in a tree whose
    consumers report their cutter states with their batches (TB28), from those reports — the
    loader's ``CursorBook`` records one ``BatchMeta`` per consumer (made here, untimed: a worker
    has its state for free) and the timed part is its gather and the ``tokens`` part."""
    consumers, k = plan.num_consumers, plan.level.split.num_blocks * 9 // 10 // BATCH * BATCH
    row: dict[str, Any] = {}
    for name, at in (("state_computed_s", k), ("state_computed_again_s", k - BATCH)):
        t = time.perf_counter()
        plan.tokens_part(blocks, [at] * consumers, [])
        row[name] = time.perf_counter() - t
    try:
        from shardkit.loader.token_cursors import CursorBook
        from shardkit.loader.topology import Topology
        from shardkit.loader.transfer.meta import BatchMeta
        from shardkit.plan.tokens.cursor import cursor_row
    except ImportError:  # a tree before TB28
        return row
    at = k - 2 * BATCH
    book = CursorBook()
    for c in range(consumers):
        book.record(BatchMeta(c, at, 0, (), cursor_row(plan.consumer_state(c, at))))
    t = time.perf_counter()
    known = book.gather([at] * consumers, Topology(0, 1, 0, consumers), consumers, True)
    plan.tokens_part(blocks, [at] * consumers, [], known)
    row["state_reported_s"] = time.perf_counter() - t
    return row


def _state(num_docs: int) -> dict[str, Any]:
    from shardkit.plan import PlanParams
    from shardkit.plan.tokens.config import TokenBlocks
    from shardkit.plan.tokens.plan import build_token_plan
    sizes = np.full(max(num_docs // 10_000, 1), 10_000, dtype=np.int64)
    blocks = TokenBlocks(SEQ_LEN, eos_id=0)
    plan = build_token_plan(sizes, _lengths(int(sizes.sum()), False), PlanParams(seed=0, batch_size=BATCH), blocks)
    offset = plan.level.split.num_blocks * 9 // 10 // BATCH * BATCH
    times = []
    for _ in range(5):
        t = time.perf_counter()
        plan.tokens_part(blocks, [offset], [])
        times.append(time.perf_counter() - t)
    return {"case": "state", "docs": int(sizes.sum()), "blocks_consumed": offset,
            "state_s_median": statistics.median(times), "state_s_first": times[0]}


def _pack(num_docs: int, ranks: int) -> dict[str, Any]:
    """``ranks`` > 1: the plan of rank 0 of that many ranks (2 workers each); a tree that shares
    the count among ranks (TB29) counts rank 0's consumers only (its all-reduce stood in for by
    rank 0's own value: the timing, not the count, is measured)."""
    from shardkit.plan import PlanParams
    from shardkit.plan.tokens.config import TokenBlocks
    from shardkit.plan.tokens.plan import build_token_plan
    base = _peak_rss()
    sizes = np.full(max(num_docs // 10_000, 1), 10_000, dtype=np.int64)
    blocks = TokenBlocks(SEQ_LEN, mode="pack", eos_id=0)
    params = PlanParams(seed=0, world_size=ranks, num_workers=2, batch_size=BATCH)
    extra: dict[str, Any] = {}
    if ranks > 1:
        try:
            from shardkit.plan.tokens.pack_count import CountShare
            extra = {"share": CountShare(range(2), lambda value, op: value)}
        except ImportError:  # a tree before TB29: every rank counts every consumer
            pass
    t = time.perf_counter()
    plan = build_token_plan(sizes, _lengths(int(sizes.sum()), False), params, blocks, **extra)
    plan_s = time.perf_counter() - t
    _first_batch(plan, 0, blocks)
    first_s = time.perf_counter() - t
    row = {"case": "pack", "docs": int(sizes.sum()), "ranks": ranks, "shared_count": bool(extra), "plan_s": plan_s,
           "first_batch_s": first_s}
    try:  # a worker of this tree is handed its loader's count (TB27); an older one counts again
        t = time.perf_counter()
        worker = build_token_plan(sizes, _lengths(int(sizes.sum()), False), params, blocks,
                                  num_blocks=plan.level.split.num_blocks)
        _first_batch(worker, 0, blocks)
        row["worker_first_batch_s"] = time.perf_counter() - t
    except TypeError:
        row["worker_first_batch_s"] = first_s
    row["loader_first_batch_s"] = plan_s + row["worker_first_batch_s"]  # the loader counts, then a worker reads
    return {**row, "rss_growth_mib": (_peak_rss() - base) / MIB}


def _global(num_docs: int, ranks: int) -> dict[str, Any]:
    from shardkit.loader.global_tokens import SPAN_POSITIONS  # imports torch: before the clock and the RSS base
    from shardkit.plan import PlanParams
    from shardkit.plan.tokens.blocks import BlockCutter
    from shardkit.plan.tokens.config import TokenBlocks
    from shardkit.plan.tokens.consumer import work_view
    from shardkit.plan.tokens.global_blocks import build_global_token_plan
    from shardkit.plan.tokens.rows import TokenDocs, assemble
    base = _peak_rss()
    sizes = np.full(max(num_docs // 10_000, 1), 10_000, dtype=np.int64)
    blocks = TokenBlocks(SEQ_LEN, eos_id=0)
    params = PlanParams(seed=0, world_size=ranks, num_workers=2, batch_size=BATCH, order="global")
    t = time.perf_counter()
    plan = build_global_token_plan(sizes, _lengths(int(sizes.sum()), True), params, blocks, group=8)
    plan_s = time.perf_counter() - t
    first, count = plan.chunks(0, SPAN_POSITIONS)[0]  # a worker's first chunk of units (TB34)
    work = plan.consumer_work(0, first, count)
    view = work_view(plan.index, "concat", work.pieces, blocks.extra_tokens)
    segments = view.segments

    class Docs:
        def __getitem__(self, d: int) -> np.ndarray:
            return np.full(max(int(segments[d]) - blocks.extra_tokens, 0), 5, dtype=np.int32)

    rows = TokenDocs.from_lengths(Docs(), segments, blocks.token_options(), None, view.next_doc)
    cutter = BlockCutter(work.pieces, plan.options)
    assemble([b for b in (cutter.next_block() for _ in range(BATCH)) if b is not None], rows, SEQ_LEN, "concat")
    return {"case": "global", "docs": int(sizes.sum()), "ranks": ranks, "plan_s": plan_s,
            "first_batch_s": time.perf_counter() - t, "consumer_pieces": len(work.pieces),
            "view_docs": len(segments.values), "steps": plan.steps, "rss_growth_mib": (_peak_rss() - base) / MIB}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=("scale", "state", "pack", "global"), default="scale")
    parser.add_argument("--docs", type=int, default=None)
    parser.add_argument("--ranks", type=int, default=1, help="pack: plan as rank 0 of this many ranks")
    parser.add_argument("--code", default=None, help="the tree to import shardkit from (default: this one)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    docs = args.docs or {"scale": 10**9, "state": 10**6, "pack": 660_000, "global": 660_000}[args.case]
    if args.child:
        print(json.dumps(child(args.case, docs, args.ranks)), flush=True)
        return
    code = os.path.abspath(args.code or os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": code}  # shardkit from ``code``; this file run as a script
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--case", args.case, "--docs", str(docs),
           "--ranks", str(args.ranks)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=code).stdout
    save_rows([{"event": "token_plan_scale", "code": code, **json.loads(out.strip().splitlines()[-1])}], args.out)


if __name__ == "__main__":
    main()
