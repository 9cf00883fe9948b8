"""Token blocks through ``ShardLoader``: effective tokens/s and padding (specs/token-blocks.md TB9).

    python -m benchmarks.token_loader [--docs 20000] [--seq-len 2048] [--batch-size 8] \
        [--workers 0 2] [--out DIR]

Writes (or reuses, with ``--out``) a dataset of log-normal token documents (median 600 tokens,
σ = 1, uint16), then prints one JSON line per measurement:

- ``kind=loader``: ``StreamingDataset(..., tokens=TokenBlocks(L, mode))`` through
  ``ShardLoader(num_workers=W)`` for the whole epoch: effective (non-padding) tokens/s, the
  padding fraction, and the seconds before the first batch (the per-document lengths scan and
  the plan included);
- ``kind=raw``: the baseline of the issue's target — one process reads every sample of the same
  shards, joins them with EOS and cuts ``(B, L + 1)`` blocks with numpy (no shuffle, no state).

Numbers from a shared, loaded machine are lower bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

import shardkit as sk
from benchmarks.token_blocks import log_normal_lengths


def write_corpus(root: str, num_docs: int) -> str:
    if os.path.exists(os.path.join(root, "manifest.json")):
        return root
    rng = np.random.default_rng(0)
    with sk.ShardWriter(root) as writer:
        for n in log_normal_lengths(num_docs):
            writer.write({"tokens": rng.integers(3, 50_000, int(n)).astype(np.uint16)})
    return root


def measure_loader(path: str, seq_len: int, batch_size: int, workers: int, mode: str) -> dict:
    ds = sk.StreamingDataset(path, batch_size=batch_size, tokens=sk.TokenBlocks(seq_len, mode=mode, eos_id=2))
    loader = sk.ShardLoader(ds, num_workers=workers)
    started = time.perf_counter()
    first, tokens, padding, steps = None, 0, 0, 0
    for batch in loader:
        first = first if first is not None else time.perf_counter() - started
        tokens, padding, steps = tokens + batch["num_tokens"], padding + batch["num_padding"], steps + 1
    wall = time.perf_counter() - started
    return {"kind": "loader", "mode": mode, "workers": workers, "seq_len": seq_len, "batch_size": batch_size,
            "steps": steps, "tokens_per_s": tokens / wall, "padding_fraction": padding / max(tokens + padding, 1),
            "first_batch_s": first, "wall_s": wall}


def measure_raw(path: str, seq_len: int, batch_size: int) -> dict:
    started = time.perf_counter()
    dataset, eos = sk.open_dataset(path), np.array([2], dtype=np.int64)
    buffer, tokens, blocks = np.zeros(0, dtype=np.int64), 0, 0
    per_batch = batch_size * seq_len
    for sample in dataset.samples():
        buffer = np.concatenate([buffer, sample["tokens"].astype(np.int64), eos])
        while len(buffer) > per_batch:  # inputs and the labels shifted by one, as int64 (B, L) rows
            _inputs = buffer[:per_batch].reshape(batch_size, seq_len).copy()
            _labels = buffer[1 : per_batch + 1].reshape(batch_size, seq_len).copy()
            buffer, tokens, blocks = buffer[per_batch:], tokens + per_batch, blocks + 1
    wall = time.perf_counter() - started
    return {"kind": "raw", "seq_len": seq_len, "batch_size": batch_size, "steps": blocks,
            "tokens_per_s": tokens / wall, "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=20_000)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--modes", nargs="+", default=["concat", "pack"])
    p.add_argument("--out", default=None, help="dataset folder (kept; reused when it exists)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_corpus(args.out or os.path.join(tmp, "corpus"), args.docs)
        print(json.dumps(measure_raw(path, args.seq_len, args.batch_size)), flush=True)
        for mode in args.modes:
            for workers in args.workers:
                print(json.dumps(measure_loader(path, args.seq_len, args.batch_size, workers, mode)), flush=True)


if __name__ == "__main__":
    main()
