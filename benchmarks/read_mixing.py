"""Read throughput of a dataset packed in source order, read-time mixing on vs off
(specs/partition.md P18): does the default ``spread`` cost read speed?

    python -m benchmarks.read_mixing [--classes 200] [--per-class 200] [--sample-bytes 16384]
        [--shard-size 4MiB] [--world-size 8] [--workers 4] [--batch-size 256] [--repeats 3]
        [--root bench-data/read_mixing]

Packs once (kept under ``--root``; labels sorted, recorded as source order, ~250 samples and
one class per shard by default), then reads rank 0's share of a ``--world-size`` job through
``ShardLoader`` three ways, interleaved ``--repeats`` times: ``spread=12`` (the default),
``spread=1`` (the old default), ``shuffle=False``. One JSON line per read: steady samples/s
(after the first batch), payload MB/s, mean distinct labels per batch. Timings need a quiet
machine; the distinct labels do not.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.measure import emit, now

MODES = {  # name: StreamingDataset keyword arguments
    "spread-12 (default)": {"shuffle": True, "spread": 12},
    "spread-1 (old default)": {"shuffle": True, "spread": 1},
    "no-shuffle": {"shuffle": False},
}


def pack(root: Path, classes: int, per_class: int, sample_bytes: int, shard_size: str) -> str:
    import shardkit as sk

    path = root / f"sorted-{classes}x{per_class}-{sample_bytes}B-{shard_size}"
    if (path / "manifest.json").exists():
        return str(path)
    rng = np.random.default_rng(0)
    payload = rng.integers(0, 256, sample_bytes, dtype=np.uint8).tobytes()  # incompressible, as JPEG
    with sk.ShardWriter(str(path), shard_size=shard_size) as writer:
        writer.order = {"shuffled": False}
        for index in range(classes * per_class):
            writer.write({"id": index, "label": index // per_class, "jpg": payload})
    return str(path)


def _num_bytes(column: Any) -> int:
    if hasattr(column, "values"):
        return int(column.values.numel() if hasattr(column.values, "numel") else len(column.values))
    return sum(len(value) for value in column)


def read(path: str, mode: str, world_size: int, workers: int, batch_size: int) -> dict[str, Any]:
    import shardkit as sk

    dataset = sk.StreamingDataset(path, batch_size=batch_size, **MODES[mode])
    dataset.options = dataclasses.replace(dataset.options, rank=0, world_size=world_size)
    loader = sk.ShardLoader(dataset, num_workers=workers)
    distinct: list[int] = []
    t0 = now()
    iterator = iter(loader)
    first = next(iterator)
    t_first = now()
    distinct.append(len(np.unique(np.asarray(first["label"]))))
    samples = payload = 0
    for batch in iterator:
        labels = np.asarray(batch["label"])
        distinct.append(len(np.unique(labels)))
        samples += len(labels)
        payload += _num_bytes(batch["jpg"])
    seconds = max(now() - t_first, 1e-9)
    return {
        "bench": "read_mixing",
        "mode": mode,
        "world_size": world_size,
        "workers": workers,
        "batch_size": batch_size,
        "samples": samples + len(first["label"]),
        "ttfb_s": round(t_first - t0, 4),
        "samples_per_s": round(samples / seconds, 1),
        "mb_per_s": round(payload / seconds / 1e6, 2),
        "distinct_labels_per_batch": round(float(np.mean(distinct)), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=200)
    parser.add_argument("--per-class", type=int, default=200)
    parser.add_argument("--sample-bytes", type=int, default=16384)
    parser.add_argument("--shard-size", default="4MiB")
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--root", type=Path, default=Path("bench-data/read_mixing"))
    args = parser.parse_args(argv)
    path = pack(args.root, args.classes, args.per_class, args.sample_bytes, args.shard_size)
    for mode in MODES:  # untimed: page cache hot for every mode
        read(path, mode, args.world_size, args.workers, args.batch_size)
    for _ in range(args.repeats):
        for mode in MODES:
            emit(read(path, mode, args.world_size, args.workers, args.batch_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
