"""What the per-sample length index costs the writer (specs/manifest.md M12): ``ShardWriter``
with the default ``length_index=None`` (every integer array field) against ``length_index=()``.

    python -m benchmarks.length_index [--docs 5000] [--reps 3]

Three corpora, one JSON line each (best of ``--reps``, alternating): token documents of
log-normal length (median 600) stored as column blocks, the same with non-uniform keys (row
blocks, where the lengths come from a msgpack walk of the block), and 6× as many tiny row
samples (the walk's worst case per byte). ``overhead`` = with / without − 1.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks.token_blocks import log_normal_lengths


def corpora(num_docs: int) -> dict[str, list[dict[str, Any]]]:
    rng = np.random.default_rng(0)
    lengths = log_normal_lengths(num_docs)
    docs = [rng.integers(3, 50_257, n).astype(np.uint16) for n in lengths]
    return {
        "tokens-columns": [{"id": i, "tokens": d} for i, d in enumerate(docs)],
        "tokens-rows": [{"id": i, "tokens": d, **({"x": 1} if i % 2 else {})} for i, d in enumerate(docs)],
        "tiny-rows": [
            {"id": i, "tokens": np.arange(i % 30, dtype=np.int32), **({"x": "a"} if i % 2 else {})}
            for i in range(6 * num_docs)
        ],
    }


def write_seconds(samples: list[dict[str, Any]], length_index: tuple[str, ...] | None) -> float:
    import shardkit as sk

    with tempfile.TemporaryDirectory(prefix="length-index-") as out:
        started = time.perf_counter()
        with sk.ShardWriter(out, length_index=length_index) as writer:
            for sample in samples:
                writer.write(sample)
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    write_seconds([{"tokens": np.arange(3)}], None)  # imports and first-use costs, untimed
    for name, samples in corpora(args.docs).items():
        best = {"with": float("inf"), "without": float("inf")}
        for _ in range(args.reps):
            best["with"] = min(best["with"], write_seconds(samples, None))
            best["without"] = min(best["without"], write_seconds(samples, ()))
        print(
            json.dumps(
                {
                    "bench": "length_index",
                    "corpus": name,
                    "samples": len(samples),
                    "with_s": round(best["with"], 4),
                    "without_s": round(best["without"], 4),
                    "overhead": round(best["with"] / best["without"] - 1, 4),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
