"""Where the time of a shardkit read goes: per-stage seconds from ``loader.stats()``, one JSON line.

    python -m benchmarks.profile_read --kind images --scale 0.3 --consumer per-sample
    py-spy record -r 250 -f raw -o prof.txt -- python -m benchmarks.profile_read ...   # sampling

``--consumer`` is what the training loop does with each batch, because that is part of what a
user measures:

* ``columns``: hash each payload through the batch's flat ``values``/``offsets`` (what
  ``benchmarks.read`` does: no per-sample object is made);
* ``per-sample``: ``for payload in batch[field]`` — one ``bytes`` (or tensor) per sample, the way
  most training code walks a batch — then hash it;
* ``none``: touch nothing (the loader's own ceiling).

The digest is checked against the source's for ``columns`` and ``per-sample``, as in
``benchmarks.read``. Used to find the cause of the W=0 large-sample gap
(benchmarks/README.md, "Large samples at W=0").
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from benchmarks import data
from benchmarks.checksum import Digest
from benchmarks.measure import emit
from benchmarks.peers.shardkit import to_numpy

FIELDS = {"tokens": "tokens", "images": "jpg"}


def consume(batch: Any, field: str, consumer: str, digest: Digest) -> None:
    if consumer == "none":
        return
    ids = to_numpy(batch["id"])
    column = batch[field]
    if consumer == "columns":
        digest.add_ragged(ids, to_numpy(column.values), to_numpy(column.offsets))
        return
    for sample_id, payload in zip(ids.tolist(), column, strict=True):
        digest.add(sample_id, payload if isinstance(payload, bytes) else np.ascontiguousarray(payload))


def profile(kind: str, scale: float, workers: int, consumer: str, batch_size: int) -> dict[str, Any]:
    import shardkit as sk

    source = data.load(kind, scale)
    dataset = sk.StreamingDataset(str(source.packed_dir("shardkit")), batch_size=batch_size, shuffle=False)
    loader = sk.ShardLoader(dataset, num_workers=workers)
    digest = Digest()
    started = time.perf_counter()
    for batch in loader:
        consume(batch, FIELDS[kind], consumer, digest)
    elapsed = time.perf_counter() - started
    stats = loader.stats()
    return {
        "event": "profile", "kind": kind, "scale": scale, "workers": workers, "consumer": consumer,
        "samples": stats["samples"], "epoch_s": round(elapsed, 3),
        "samples_per_s": round(stats["samples"] / elapsed, 1),
        "loader_wait_s": round(stats["wait_total_s"], 3),
        "consumer_s": round(elapsed - stats["wait_total_s"], 3),
        "stages_s": {k: round(v, 3) for k, v in stats["stages_s"].items()},
        "likely_bottleneck": stats.get("likely_bottleneck"),
        "ok": consumer == "none" or digest.hexdigest() == source.meta["digest"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=data.KINDS, default="images")
    parser.add_argument("--scale", type=float, default=0.3)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--consumer", choices=("columns", "per-sample", "none"), default="per-sample")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    record = profile(args.kind, args.scale, args.workers, args.consumer, args.batch_size)
    emit(record)
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
