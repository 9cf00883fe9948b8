"""A rank of the cross-rank stats test (importable, so ``torch.multiprocessing.spawn`` can run it)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import torch.distributed as dist

import shardkit as sk


def sleepy(sample: dict[str, Any]) -> dict[str, Any]:
    """The straggler's transform: every sample costs 20 ms."""
    time.sleep(0.02)
    return sample


STEP_S = 0.03  # every rank's simulated training step


def stats_rank(rank: int, world: int, path: str, out_dir: str, slow_rank: int, workers: int) -> None:
    """Train one epoch with steps of ``STEP_S`` (rank ``slow_rank``'s samples through ``sleepy``:
    80 ms per batch of 4, more than a step), then gather stats and write them."""
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=world)
    try:
        # Small shuffle windows: the transform (applied per window) costs every step, not the first.
        dataset = sk.StreamingDataset(path, batch_size=4, shuffle_window=8,
                                      transform=sleepy if rank == slow_rank else None)
        loader = sk.ShardLoader(dataset, num_workers=workers)
        for _ in loader:
            time.sleep(STEP_S)
        report = loader.stats(gather=True)
        with open(os.path.join(out_dir, f"stats{rank}.json"), "w") as fh:
            json.dump({"ranks": report["ranks"], "straggler": report["straggler"]}, fh)
    finally:
        dist.destroy_process_group()
