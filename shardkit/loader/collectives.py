"""The loader's few collectives over the default group — its consumed boundary and the rows
beside it (loader/replicas.py), gathered stats (rank_stats.py), the audit's run number
(audit_sink.py), a pack plan's step count (token_agree.py) — on small tensors placed where that
group's backend takes them: on the current CUDA device when the group is NCCL alone (NCCL has
no CPU transport, and ``init_process_group("nccl")`` is what most GPU jobs call), else on the
CPU (gloo, or a ``"cpu:gloo,cuda:nccl"`` group). Every process calls each one at the same step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def collective_device() -> torch.device:
    """Where the default group's collectives take their tensors."""
    backend = str(dist.get_backend()).lower()
    if "nccl" in backend and "cpu" not in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_gather_tensor(tensor: torch.Tensor) -> list[torch.Tensor]:
    """``tensor`` (the same shape and dtype on every process) of every process, on the CPU."""
    mine = tensor.to(collective_device())
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine)
    return [part.cpu() for part in parts]


def all_gather_ints(values: list[int]) -> list[list[int]]:
    """``values`` (the same length on every process) of every process."""
    parts = all_gather_tensor(torch.tensor(values, dtype=torch.int64))
    return [[int(x) for x in part.tolist()] for part in parts]


def all_reduce_int(value: int, op: str) -> int:
    """``value`` reduced over every process (``op``: ``"min"`` or ``"max"``)."""
    tensor = torch.tensor([value], dtype=torch.int64, device=collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN if op == "min" else dist.ReduceOp.MAX)
    return int(tensor.item())
