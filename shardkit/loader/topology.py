"""Where this process sits: rank and world size, read at ``__iter__`` time, never at construction.

Order: explicit override → ``torch.distributed`` if initialized → ``RANK``/``WORLD_SIZE`` → (0, 1).
Never calls ``init_process_group``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch.distributed as dist
from torch.utils.data import get_worker_info


@dataclass(frozen=True)
class Topology:
    rank: int
    world_size: int
    worker: int
    num_workers: int  # 0 when the training process reads itself


def rank_and_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    if rank is not None and world_size is not None:
        found = (rank, world_size)
    elif dist.is_available() and dist.is_initialized():
        found = (dist.get_rank(), dist.get_world_size())
    else:
        found = (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))
    if not 0 <= found[0] < found[1]:
        raise ValueError(f"rank {found[0]} is not in [0, world_size={found[1]})")
    return found


def worker_slot() -> tuple[int, int]:
    """``(worker id, num_workers)`` inside a DataLoader worker, ``(0, 0)`` in the main process."""
    info = get_worker_info()
    return (0, 0) if info is None else (info.id, info.num_workers)
