"""A rank of the S3 streaming tests (importable, so ``torch.multiprocessing.spawn`` can run it)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import torch.distributed as dist

import shardkit as sk


def stream_rank(rank: int, world: int, url: str, options: dict[str, Any], out_dir: str, spec: dict[str, Any]) -> None:
    """Join a gloo group, stream one epoch, write ``rank<R>.json`` with the indices per step."""
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=world)
    try:
        dataset = sk.StreamingDataset(url, batch_size=spec["batch_size"], with_index=True, tail=spec["tail"],
                                      shuffle_window=64, cache_dir=spec.get("cache_dir"),
                                      cache_limit=spec.get("cache_limit", "1GiB"), storage_options=options)
        loader = sk.ShardLoader(dataset, num_workers=spec["workers"])
        steps = [batch["_index"][~batch["_padded"]].tolist() if "_padded" in batch else batch["_index"].tolist()
                 for batch in loader]
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
            json.dump({"steps": steps, "stats": loader.stats()}, fh)
    finally:
        dist.destroy_process_group()


def open_rank(rank: int, world: int, url: str, options: dict[str, Any], out_dir: str, spec: dict[str, Any]) -> None:
    """A rank on simulated node ``rank // ranks_per_node`` (its own cache dir): open the
    dataset, start ``workers`` DataLoader workers and take one batch (no process group needed)."""
    node = rank // spec["ranks_per_node"]
    dataset = sk.StreamingDataset(url, batch_size=4, cache_dir=os.path.join(out_dir, f"node{node}"),
                                  cache_limit="1GiB", storage_options=options)
    dataset.options = dataclasses.replace(dataset.options, rank=rank, world_size=world)
    next(iter(sk.ShardLoader(dataset, num_workers=spec["workers"])))
