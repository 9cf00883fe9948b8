"""``shardkit bench``: read a dataset as training would and report what it can feed (G10).

Phase 1 reads ``steps`` batches as fast as possible (time to first batch, samples/s, decoded
MB/s, wait percentiles, time per worker stage; with token blocks, effective tokens/s and the
padding fraction, TB9). With ``step_time``, phase 2 simulates a training
loop that spends ``step_time`` per step and reports whether data keeps up: the rule of thumb
is loader throughput ≥ 1.2 × consumption (G10 in docs/guarantees.md).

Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment) every rank reads its own part of the
plan, as training would; the bench joins a gloo process group itself if none is initialized,
and each phase's stats carry the cross-rank view (``stats(gather=True)``: per-rank data-wait
fraction, the straggling rank and host). Every rank returns the same report.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from shardkit.errors import PlanError
from shardkit.loader.dataset import StreamingDataset
from shardkit.loader.shard_loader import ShardLoader
from shardkit.plan.tokens.config import TokenBlocks

KEEP_UP_FACTOR = 1.2


@dataclass(frozen=True)
class BenchOptions:
    workers: int = 2
    batch_size: int = 64
    steps: int = 200
    step_time: float | None = None
    cache_dir: str | None = None
    shuffle: bool = True
    storage_options: dict[str, Any] | None = None
    tokens: TokenBlocks | None = None  # read token blocks (batch_size counts blocks, TB9)


def _loader(path: str, options: BenchOptions) -> ShardLoader:
    dataset = StreamingDataset(path, batch_size=options.batch_size, shuffle=options.shuffle,
                               cache_dir=options.cache_dir, storage_options=options.storage_options,
                               tokens=options.tokens)
    return ShardLoader(dataset, num_workers=options.workers)


def _run(loader: ShardLoader, steps: int, step_time: float | None) -> dict[str, Any]:
    started = time.perf_counter()
    first = None
    count = 0
    for _ in loader:
        count += 1
        if first is None:
            first = time.perf_counter() - started
        if step_time:
            time.sleep(step_time)
        if count >= steps:
            break
    if first is None:  # e.g. an epoch empty for this topology only (logged, P16/TB24): nothing to time
        raise PlanError(f"{loader.streaming.path}: the loader yielded no batch with {loader.num_workers} "
                        "worker(s); nothing to measure (a smaller batch size or fewer workers may give some)")
    stats = loader.stats(gather=_distributed())
    stats["time_to_first_batch_s"] = first
    stats["wall_s"] = time.perf_counter() - started
    return stats


def _distributed() -> bool:
    """Whether this is one rank of several (torchrun); joins a gloo group when none is set up."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        dist.init_process_group("gloo")  # env:// from torchrun's MASTER_ADDR/PORT, RANK, WORLD_SIZE
    return True


def run_bench(path: str, options: BenchOptions) -> dict[str, Any]:
    """The bench report; under torchrun every rank reads its part and the ranks' stats are
    gathered over a gloo group it joins (and leaves again, so no rank exits with the group's
    threads still running: that aborted a rank now and then)."""
    owned = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized()
    report = _bench(path, options)
    if owned and dist.is_initialized():
        dist.barrier()  # every rank is done with the group before any of them leaves it
        dist.destroy_process_group()
    return report


def _bench(path: str, options: BenchOptions) -> dict[str, Any]:
    report: dict[str, Any] = {"path": path, "rank": int(os.environ.get("RANK", "0")),
                              **{k: v for k, v in options.__dict__.items()
                                 if k not in ("storage_options", "tokens")}}
    if options.tokens is not None:
        report["tokens"] = {"seq_len": options.tokens.seq_len, "mode": options.tokens.mode,
                            "field": options.tokens.field}
    report["throughput"] = _run(_loader(path, options), options.steps, None)
    if options.step_time:
        consume = options.batch_size / options.step_time
        simulated = _run(_loader(path, options), options.steps, options.step_time)
        ratio = report["throughput"]["samples_per_s"] / consume
        report["simulated"] = simulated
        report["consumption_samples_per_s"] = consume
        report["keep_up_ratio"] = ratio
        report["keeps_up"] = ratio >= KEEP_UP_FACTOR
    return report
