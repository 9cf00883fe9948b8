"""The cross-rank view of loader statistics: ``ShardLoader.stats(gather=True)`` (G10).

Collective, like ``state_dict``: every process of the default group calls it at the same point.
Each contributes one float64 row (its data-wait time, elapsed time, steps, samples, wait p99,
likely stage, its slowest shard open, its data-parallel rank and whether it reads) and its
host name as fixed-size bytes — two ``all_gather`` calls, no pickling. Every rank gets the
same report:

    {"ranks": [{"rank", "host", "wait_fraction", "wait_total_s", "wait_first_s", "elapsed_s", "steps",
                "samples_per_s", "wait_p99_s", "likely_bottleneck", "slowest_shard",
                "slowest_shard_open_s", "data_parallel_rank", "reads"}, ...],
     "straggler": {"rank", "host", "wait_fraction", "others_median", "shard"} | None}

``wait_fraction`` is the share of the rank's wall time its training loop spent waiting for
data after the first batch (the wait for the first batch — worker start-up, first shard opens —
is reported apart as ``wait_first_s``: it says nothing about keeping up). The straggler is
the rank with the largest one when it is at least ``STRAGGLER_MIN`` and ``STRAGGLER_FACTOR``
times the median of the other ranks; ``shard`` is the shard whose
open took longest on that rank (a slow download or cache wait), when one was opened.
"""

from __future__ import annotations

import socket
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from shardkit.errors import StateError
from shardkit.loader.collectives import all_gather_tensor
from shardkit.loader.loader_stats import STAGES
from shardkit.loader.topology import Topology

STRAGGLER_MIN = 0.05  # a rank waiting less than 5% of its time is not called a straggler
STRAGGLER_FACTOR = 1.5  # ... nor one waiting less than 1.5× the other ranks' median
HOST_BYTES = 64
_ROW = ("wait_total_s", "wait_first_s", "elapsed_s", "steps", "samples", "wait_p99_s", "stage",
        "slowest_open_s", "slowest_shard", "data_parallel_rank", "reads")


def gather_rank_stats(summary: dict[str, Any], slowest: tuple[float, int], topology: Topology, reads: bool,
                      shard_name: Callable[[int], str | None]) -> dict[str, Any]:
    """Every process's row of ``summary`` (this rank's ``LoaderStats.summary()``), and the
    straggler among the processes that read (P25)."""
    stage = STAGES.index(summary["likely_bottleneck"]) if summary["likely_bottleneck"] in STAGES else -1
    values = [summary[key] for key in _ROW[:6]] + [stage, slowest[0], slowest[1], topology.rank, float(reads)]
    row = torch.tensor(values, dtype=torch.float64)
    host = torch.zeros(HOST_BYTES, dtype=torch.uint8)
    name = socket.gethostname().encode("utf-8", "replace")[:HOST_BYTES]
    host[: len(name)] = torch.tensor(list(name), dtype=torch.uint8)
    rows, hosts = _all_gather(row, topology), _all_gather(host, topology)
    ranks = [_rank_entry(rank, r.tolist(), bytes(h.tolist()).rstrip(b"\0").decode("utf-8", "replace"), shard_name)
             for rank, (r, h) in enumerate(zip(rows, hosts, strict=True))]
    return {"ranks": ranks, "straggler": find_straggler([r for r in ranks if r["reads"]])}


def find_straggler(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank waiting for data far more than the others (the rule in the module docstring)."""
    if not ranks:
        return None
    worst = max(ranks, key=lambda r: r["wait_fraction"])
    others = [r["wait_fraction"] for r in ranks if r is not worst]
    median = statistics.median(others) if others else 0.0
    if worst["wait_fraction"] < STRAGGLER_MIN or worst["wait_fraction"] < STRAGGLER_FACTOR * median:
        return None
    return {"rank": worst["rank"], "host": worst["host"], "wait_fraction": worst["wait_fraction"],
            "others_median": median, "shard": worst["slowest_shard"]}


def _rank_entry(rank: int, row: list[float], host: str, shard_name: Callable[[int], str | None]) -> dict[str, Any]:
    values = dict(zip(_ROW, row, strict=True))
    elapsed = max(values["elapsed_s"], 1e-9)
    steady = max(values["elapsed_s"] - values["wait_first_s"], 1e-9)
    stage, shard = int(values["stage"]), int(values["slowest_shard"])
    return {
        "rank": rank, "host": host,
        "wait_fraction": min(max(values["wait_total_s"] - values["wait_first_s"], 0.0) / steady, 1.0),
        "wait_total_s": values["wait_total_s"], "wait_first_s": values["wait_first_s"],
        "elapsed_s": values["elapsed_s"], "steps": int(values["steps"]),
        "samples_per_s": values["samples"] / elapsed, "wait_p99_s": values["wait_p99_s"],
        "likely_bottleneck": STAGES[stage] if 0 <= stage < len(STAGES) else None,
        "slowest_shard": shard_name(shard) if shard >= 0 else None,
        "slowest_shard_open_s": values["slowest_open_s"],
        "data_parallel_rank": int(values["data_parallel_rank"]), "reads": bool(values["reads"]),
    }


def _all_gather(tensor: torch.Tensor, topology: Topology) -> list[torch.Tensor]:
    """``tensor`` of every process of the default group (more than the data-parallel ranks when
    model-parallel replicas share one: P25)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        if topology.world_size > 1:
            raise StateError("stats(gather=True) with world_size > 1 needs torch.distributed initialized: "
                             "it gathers every rank's statistics")
        return [tensor]
    return all_gather_tensor(tensor)
