"""Pack-time shuffle cost (specs/pack-shuffle.md): pack time and temp disk, shuffled vs not.

    python -m benchmarks.pack_shuffle [--rows 200000] [--repeats 3] [--out benchmarks/results/pack_shuffle.jsonl]

A JSONL source sorted by label (1,000 classes) is packed three ways: ``--no-shuffle``, shuffled
in memory (the default 256 MiB budget holds it) and shuffled with a budget of 1/16 of the
source (so it spills to bucket files). Prints one JSON line per mode: median seconds of
``repeats`` runs, temp bytes, and the ratio to the unshuffled pack. No load control: the
machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

from shardkit.write.pack import PackOptions, pack
from shardkit.write.shuffle import ShuffleOptions


def _source(path: str, rows: int) -> int:
    with open(path, "w") as fh:
        for i in range(rows):
            label = i * 1000 // rows
            fh.write(json.dumps({"id": i, "label": label, "text": f"sample {i} of class {label} " * 8}) + "\n")
    return os.path.getsize(path)


def _run(src: str, root: str, shuffle: ShuffleOptions | None, repeats: int) -> tuple[float, int]:
    times, temp = [], 0
    for repeat in range(repeats):
        out = os.path.join(root, f"out-{time.monotonic_ns()}-{repeat}")
        started = time.perf_counter()
        summary = pack(src, out, PackOptions(shard_size="16MiB", shuffle=shuffle))
        times.append(time.perf_counter() - started)
        temp = summary.shuffle_temp_bytes
    return statistics.median(times), temp


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as root:
        src = os.path.join(root, "rows.jsonl")
        size = _source(src, args.rows)
        modes = {
            "no-shuffle": None,
            "shuffle-in-memory": ShuffleOptions(),
            "shuffle-spilled": ShuffleOptions(memory=max(1, size // 16), tmp_dir=root),
        }
        base = 0.0
        for name, shuffle in modes.items():
            seconds, temp = _run(src, root, shuffle, args.repeats)
            base = base or seconds
            results.append({"bench": "pack_shuffle", "mode": name, "rows": args.rows, "source_bytes": size,
                            "seconds": round(seconds, 3), "temp_bytes": temp,
                            "time_ratio": round(seconds / base, 3), "temp_ratio": round(temp / size, 3)})
            print(json.dumps(results[-1]), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in results)
    return results


if __name__ == "__main__":
    main()
