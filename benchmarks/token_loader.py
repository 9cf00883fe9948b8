"""Token blocks end to end (T6, benchmarks/README.md): effective tokens/s of LM blocks read from
one token corpus by LitData's ``TokensLoader``, a raw numpy loop and shardkit's token blocks.

    python -m benchmarks.token_loader [--docs 200000] [--seq-len 2048] [--workers 2 [1 0]] [--batch-size 8]
                                      [--raw-procs 1 2]

One corpus per run: ``--docs`` documents with log-normal lengths (median 600, σ = 1, seed 0)
of uniform uint16 token ids below 50,257, an EOS id 2 after each; packed once per library into
``--root`` (a temporary folder by default):

- ``litdata``: ``litdata.optimize`` (each document + EOS as one token array, chunks of
  ``(L+1)·1024`` tokens, ``TokensLoader()``), read by ``StreamingDataset(item_loader=
  TokensLoader(block_size=L+1))`` and ``StreamingDataLoader(num_workers=W)``: every row is
  ``L+1`` tokens (inputs and shifted labels), no padding, no document boundaries;
- ``raw``: the shardkit shards read by ``--raw-procs`` processes (one per core by default),
  each its share of shards: every block's token column (``parse_columns``), EOS inserted, cut
  into rows of ``L+1`` with numpy — the ceiling of any loader over these shards;
- ``shardkit-concat`` / ``shardkit-pack``: ``sk.StreamingDataset(path, batch_size=B,
  tokens=sk.TokenBlocks(L, field="tokens", mode=…, eos_id=2))`` and ``sk.ShardLoader(ds,
  num_workers=W)``; "unavailable" until shardkit exports ``TokenBlocks``.

Every measurement prints one JSON line: ``tokens_per_s`` counts effective (non-padding) input
tokens over the steady state (after the first batch, which includes start-up and is reported
as ``ttfb_s``), ``padding_fraction`` padding slots over all slots. A ``kind=plan`` line gives
the pack-mode padding of the cutter on the corpus lengths (target ≤ 5%), and ``kind=targets``
the ratios of T6 (shardkit ≥ 3× litdata, ≥ 50% of raw). Numbers from a loaded machine are
lower bounds; the lead runs it on a quiet one.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.token_blocks import log_normal_lengths, measure_padding

EOS = 2
VOCAB = 50_257


def make_corpus(root: Path, num_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """Token values and document offsets (saved under ``root`` for litdata's writer process)."""
    lengths = log_normal_lengths(num_docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = np.random.default_rng(0).integers(3, VOCAB, int(offsets[-1])).astype(np.uint16)
    np.save(root / "values.npy", values)
    np.save(root / "offsets.npy", offsets)
    return values, offsets


def pack_shardkit(out: Path, values: np.ndarray, offsets: np.ndarray) -> float:
    import shardkit as sk

    started = time.perf_counter()
    with sk.ShardWriter(str(out), shard_size="64MiB") as writer:
        for i in range(len(offsets) - 1):
            writer.write({"id": i, "tokens": values[offsets[i] : offsets[i + 1]]})
    return time.perf_counter() - started


def _litdata_docs(root: str, chunk: int) -> Iterator[Any]:
    """Runs in litdata's writer process: documents ``chunk·1000 …`` with their EOS."""
    import torch

    values, offsets = np.load(f"{root}/values.npy", mmap_mode="r"), np.load(f"{root}/offsets.npy")
    for i in range(chunk * 1000, min((chunk + 1) * 1000, len(offsets) - 1)):
        doc = np.append(values[offsets[i] : offsets[i + 1]].astype(np.int32), EOS)
        yield torch.from_numpy(doc)


def pack_litdata(out: Path, root: Path, num_docs: int, seq_len: int) -> float:
    import litdata
    from litdata.streaming.item_loader import TokensLoader

    started = time.perf_counter()
    method = multiprocessing.get_start_method(allow_none=True)
    try:
        with _stdout_to_stderr():  # litdata and its writer process print progress on stdout
            _optimize(litdata, TokensLoader, out, root, num_docs, seq_len)
    finally:  # litdata's optimize() calls set_start_method("spawn", force=True) for the whole process:
        # the loaders measured after it would start spawn workers (no shared ring: 3-4x slower)
        multiprocessing.set_start_method(method, force=True)
    return time.perf_counter() - started


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _optimize(litdata: Any, tokens_loader: Any, out: Path, root: Path, num_docs: int, seq_len: int) -> None:
    litdata.optimize(
        fn=functools.partial(_litdata_docs, str(root)),
        inputs=list(range((num_docs + 999) // 1000)),
        output_dir=str(out),
        chunk_size=(seq_len + 1) * 1024,
        item_loader=tokens_loader(),
        num_workers=1,
    )


def _steady(batches: Iterator[Any], count: Any) -> dict[str, Any]:
    """Effective tokens/s after the first batch; ``count(batch)`` → (tokens, padding)."""
    t0 = time.perf_counter()
    first = next(batches)
    t_first = time.perf_counter()
    tokens, padding = count(first)
    steady_tokens = all_padding = 0
    for batch in batches:
        t, p = count(batch)
        steady_tokens, all_padding = steady_tokens + t, all_padding + p
    seconds = max(time.perf_counter() - t_first, 1e-9)
    total, pad = tokens + steady_tokens, padding + all_padding
    return {
        "tokens": total,
        "padding_fraction": round(pad / max(total + pad, 1), 4),
        "ttfb_s": round(t_first - t0, 3),
        "tokens_per_s": round(steady_tokens / seconds),
    }


def read_litdata(out: Path, seq_len: int, workers: int, batch_size: int) -> dict[str, Any]:
    import litdata
    from litdata.streaming.item_loader import TokensLoader

    dataset = litdata.StreamingDataset(str(out), item_loader=TokensLoader(block_size=seq_len + 1), shuffle=False)
    loader = litdata.StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers)

    def count(batch: Any) -> tuple[int, int]:
        rows, width = batch.shape  # each row: L inputs, and labels shifted by one
        return int(rows) * (int(width) - 1), 0

    return _steady(iter(loader), count)


def _raw_worker(path: str, shards: list[int], seq_len: int) -> int:
    """Cut rows of ``seq_len + 1`` from the token columns of ``shards``; the input tokens cut."""
    from shardkit.format.column_parse import parse_columns
    from shardkit.read import open_dataset

    dataset, carry, tokens = open_dataset(path), np.zeros(0, np.int64), 0
    for shard in shards:
        with dataset.open_shard(shard) as reader:
            for block in range(reader.num_blocks):
                n = int(reader.index.blocks[block]["num_samples"])
                (column,) = [c for c in parse_columns(reader.read_raw_block(block), n) if c.name == "tokens"]
                if column.offsets is None:
                    raise ValueError(f"{path}: shard {shard}: 'tokens' is not an array column")
                ends = column.offsets[1:]
                stream = np.insert(column.data.astype(np.int64), ends, EOS)  # EOS after each document
                stream = np.concatenate([carry, stream])
                rows = (len(stream) - 1) // seq_len
                if rows:  # rows of L+1 (inputs and shifted labels), materialised as a batch would be
                    window = np.lib.stride_tricks.sliding_window_view(stream, seq_len + 1)[::seq_len][:rows]
                    tokens += int(np.ascontiguousarray(window).shape[0]) * seq_len
                carry = stream[rows * seq_len :]
    return tokens


def read_raw(path: Path, seq_len: int, procs: int) -> dict[str, Any]:
    from shardkit.read import open_dataset

    num_shards = len(open_dataset(str(path)).manifest.shards)
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        parts = pool.starmap(
            _raw_worker, [(str(path), list(range(p, num_shards, procs)), seq_len) for p in range(procs)]
        )
    seconds = time.perf_counter() - started
    return {
        "tokens": sum(parts),
        "padding_fraction": 0.0,
        "tokens_per_s": round(sum(parts) / seconds),
        "procs": procs,
        "note": "includes process start-up",
    }


def read_shardkit(path: Path, mode: str, seq_len: int, workers: int, batch_size: int) -> dict[str, Any]:
    import shardkit as sk

    if not hasattr(sk, "TokenBlocks"):
        return {"unavailable": "shardkit does not export TokenBlocks yet (loader wiring)"}
    blocks = sk.TokenBlocks(seq_len, field="tokens", mode=mode, eos_id=EOS)
    dataset = sk.StreamingDataset(str(path), batch_size=batch_size, shuffle=False, tokens=blocks)
    loader = sk.ShardLoader(dataset, num_workers=workers)
    return _steady(iter(loader), lambda b: (int(b["num_tokens"]), int(b["num_padding"])))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--workers", type=int, nargs="+", default=[2], help="one or more W (read in turn)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--raw-procs", type=int, nargs="+", default=[os.cpu_count() or 1])
    parser.add_argument("--root", type=Path, default=None, help="work folder (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="token-loader-") as tmp:
        root = args.root or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        run(args, root)


def run(args: argparse.Namespace, root: Path) -> None:
    values, offsets = make_corpus(root, args.docs)
    head = {
        "bench": "token_loader",
        "docs": args.docs,
        "corpus_tokens": len(values),
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
    }
    lengths = np.diff(offsets)
    emit = functools.partial(_emit, head)
    for record in measure_padding(lengths, args.seq_len):  # +1: the EOS of each document
        if record["fit"] == "best" and record["open_blocks"] == 16:
            emit({**record, "kind": "plan", "target": "<= 0.05"})
    emit({"kind": "pack", "impl": "shardkit", "seconds": round(pack_shardkit(root / "sk", values, offsets), 3)})
    litdata_error = None
    try:
        seconds = pack_litdata(root / "litdata", root, args.docs, args.seq_len)
        emit({"kind": "pack", "impl": "litdata", "seconds": round(seconds, 3)})
    except ImportError as exc:
        litdata_error = f"litdata: {exc}"
    raws = {procs: read_raw(root / "sk", args.seq_len, procs) for procs in args.raw_procs}
    for procs, record in raws.items():
        emit({"kind": "read", "impl": "raw", **record, "workers": procs})
    for workers in args.workers:
        results = _read_at(args, root, workers, litdata_error)
        for impl, record in results.items():
            emit({"kind": "read", "impl": impl, **record, "workers": workers})
        results["raw"] = raws.get(max(workers, 1), raws[max(raws)])  # W=0 and 1 against 1 process
        emit({"kind": "targets", "workers": workers, **_ratios(results)})


def _read_at(args: argparse.Namespace, root: Path, workers: int, litdata_error: str | None) -> dict[str, Any]:
    """LitData and both shardkit modes at ``workers``, the same packed corpus."""
    results: dict[str, dict[str, Any]] = {}
    if litdata_error is None:
        results["litdata"] = read_litdata(root / "litdata", args.seq_len, workers, args.batch_size)
    else:
        results["litdata"] = {"unavailable": litdata_error}
    for mode in ("concat", "pack"):
        results[f"shardkit-{mode}"] = read_shardkit(root / "sk", mode, args.seq_len, workers, args.batch_size)
    return results


def _ratios(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    speed = {k: v.get("tokens_per_s") for k, v in results.items()}
    out: dict[str, Any] = {}
    for mode in ("concat", "pack"):
        ours = speed.get(f"shardkit-{mode}")
        if ours and speed.get("litdata"):
            out[f"{mode}_vs_litdata"] = round(ours / speed["litdata"], 2)  # target >= 3
        if ours and speed.get("raw"):
            out[f"{mode}_vs_raw"] = round(ours / speed["raw"], 2)  # target >= 0.5
    return out or {"unavailable": "no shardkit token-block figures"}


def _emit(head: dict[str, Any], record: dict[str, Any]) -> None:
    print(json.dumps({**head, **record}), flush=True)


if __name__ == "__main__":
    main()
