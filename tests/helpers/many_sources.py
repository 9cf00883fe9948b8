"""Many small datasets, the sources of the bounded-resource tests (specs/read-path.md RP1–RP3).

Source ``s`` holds samples ``{"id": s * per_source + i, "x": int32[16]}`` for ``i < per_source``,
in one shard; a mixture of them all, one epoch of every sample, delivers each id exactly once.
"""

from __future__ import annotations

import os

import numpy as np

import shardkit as sk


def write_sources(root: str, num_sources: int, per_source: int) -> list[str]:
    """Write ``num_sources`` one-shard datasets under ``root`` (kept if already written); their paths."""
    paths = []
    for source in range(num_sources):
        path = os.path.join(root, f"src{source}")
        if not os.path.exists(os.path.join(path, "manifest.json")):
            with sk.ShardWriter(path, shard_size="64KiB", block_size="1KiB") as writer:
                for i in range(per_source):
                    writer.write({"id": source * per_source + i, "x": np.full(16, i, dtype=np.int32)})
        paths.append(path)
    return paths


def mixture_of(paths: list[str], per_source: int) -> sk.Mixture:
    """Every source at equal weight, an epoch of all their samples (stratified: each exactly once)."""
    return sk.Mixture([sk.Source(path, 1.0) for path in paths], samples_per_epoch=len(paths) * per_source,
                      composition="stratified")
