"""The token-block cutter alone, in one process (specs/token-blocks.md TB2-TB4).

    python -m benchmarks.token_blocks [--docs 20000] [--seq-len 2048] [--reps 3]

Prints one JSON line per measurement:

- ``kind=cut``: blocks cut from lengths only (the plan work), concat and pack, tokens/s;
- ``kind=rows``: blocks cut *and* assembled into input_ids/labels/position_ids/cu_seqlens
  (batches of 8 rows, written into reused buffers as the loader writes into its transfer
  memory; no provenance), tokens/s (effective, non-padding);
- ``kind=padding``: the pack-mode padding fraction on the log-normal mix (median 600 tokens,
  σ = 1) for best-fit and first-fit with 1/4/16/64 open blocks (deterministic, seed 0).

Timings are the best of ``--reps``; numbers from a shared, loaded machine are lower bounds.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from shardkit.plan.tokens.blocks import Block, BlockCutter, BlockOptions, epoch_pieces, num_positions
from shardkit.plan.tokens.rows import TokenDocs, TokenOptions, assemble


def log_normal_lengths(num_docs: int, median: int = 600, sigma: float = 1.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.maximum(1, np.round(rng.lognormal(np.log(median), sigma, num_docs))).astype(np.int64)


def _cut(lengths: np.ndarray, options: BlockOptions) -> list[Block]:
    cutter = BlockCutter(epoch_pieces(num_positions(lengths, options.mode)), options)
    blocks = []
    while (block := cutter.next_block()) is not None:
        blocks.append(block)
    return blocks


def _best(fn: Any, reps: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(reps):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def measure_cut(lengths: np.ndarray, seq_len: int, reps: int) -> list[dict[str, Any]]:
    out = []
    for mode in ("concat", "pack"):
        options = BlockOptions(seq_len, mode)
        seconds, blocks = _best(lambda options=options: _cut(lengths + 1, options), reps)
        tokens = sum(b.num_tokens for b in blocks)
        out.append({"kind": "cut", "mode": mode, "blocks": len(blocks), "tokens": tokens,
                    "tokens_per_s": round(tokens / seconds)})
    return out


def measure_rows(lengths: np.ndarray, seq_len: int, reps: int, batch: int = 8) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    docs = TokenDocs([rng.integers(3, 50_000, n).astype(np.uint16) for n in lengths], TokenOptions(eos_id=2))
    out = []
    for mode in ("concat", "pack"):
        options = BlockOptions(seq_len, mode)

        def run(options: BlockOptions = options) -> int:
            blocks, tokens = _cut(docs.segment_lengths, options), 0
            for i in range(0, len(blocks), batch):
                rows = _Reused()
                tokens += assemble(blocks[i:i + batch], docs, seq_len, options.mode, False, rows.empty)["num_tokens"]
            return tokens

        seconds, tokens = _best(run, reps)
        out.append({"kind": "rows", "mode": mode, "tokens": tokens, "tokens_per_s": round(tokens / seconds)})
    return out


class _Reused:
    """Hands out the same few (B, L) buffers each batch, as the loader's transfer ring does."""

    buffers: dict[tuple[tuple[int, ...], int], np.ndarray] = {}

    def __init__(self) -> None:
        self.handed = 0

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        key, self.handed = (shape, self.handed), self.handed + 1
        if key not in self.buffers:
            self.buffers[key] = np.empty(shape, dtype=dtype)
        return self.buffers[key]


def measure_padding(lengths: np.ndarray, seq_len: int) -> list[dict[str, Any]]:
    out = []
    for fit in ("best", "first"):
        for open_blocks in (1, 4, 16, 64):
            blocks = _cut(lengths + 1, BlockOptions(seq_len, "pack", fit=fit, open_blocks=open_blocks))
            padding = sum(b.num_padding for b in blocks) / (len(blocks) * seq_len)
            out.append({"kind": "padding", "fit": fit, "open_blocks": open_blocks, "blocks": len(blocks),
                        "padding_fraction": round(padding, 4)})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    lengths = log_normal_lengths(args.docs)  # token counts; +1 for an EOS where cut on lengths
    records = [*measure_cut(lengths, args.seq_len, args.reps), *measure_rows(lengths, args.seq_len, args.reps),
               *measure_padding(lengths, args.seq_len)]
    for record in records:
        print(json.dumps({"bench": "token_blocks", "docs": args.docs, "seq_len": args.seq_len, **record}))


if __name__ == "__main__":
    main()
