"""Pack mode's step count agreed among ranks with one all-reduce per plan (specs/token-blocks.md
TB29).

TB6's pack count ``K`` is the least (drop) or most (pad) block count over every consumer. In
the training process of a rank, with ``torch.distributed`` initialized, the loader counts only
its own consumers (``rank × W … rank × W + W − 1``) and agrees on ``K`` with the other ranks by
one ``all_reduce`` (MIN or MAX) of an int64 — reached by every rank at ``iter(loader)``
(``ConsumedBoundary.start``), the point every rank passes in lockstep. Only when every process
of the default group is one data-parallel rank: with replicas or processes that read nothing
(specs/partition.md P24-P26, which need not iterate), one process, a DataLoader worker or a
plan of one rank, every consumer is counted here, as before, and no collective is made.
"""

from __future__ import annotations

import torch.distributed as dist
from torch.utils.data import get_worker_info

from shardkit.loader.collectives import all_reduce_int
from shardkit.plan import PlanParams
from shardkit.plan.tokens.pack_count import CountShare


def count_share(params: PlanParams, rank: int) -> CountShare | None:
    """Rank ``rank``'s share of counting a pack plan of ``params``, or None (count them all)."""
    if params.world_size <= 1 or get_worker_info() is not None:
        return None
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() != params.world_size:
        return None  # replicas or ranks that read nothing (P24-P26) may never iterate: count all
    width = max(params.num_workers, 1)
    return CountShare(range(rank * width, (rank + 1) * width), all_reduce_int)
