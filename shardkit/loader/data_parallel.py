"""``DataParallel``: which data-parallel rank this process is, when tensor, pipeline or context
parallelism make several processes one model replica (specs/partition.md P22-P26).

Only the data-parallel rank and size partition the data: consumers are ``dp_rank × W + worker``
and the plan is made for ``dp_size`` ranks, so every rank of one model-parallel group (the
*replicas* of one data-parallel rank) receives the same batches. Given as a ``torch.distributed``
process group (the data-parallel group of this rank), a ``DeviceMesh`` and its data-parallel
dimension, or a plain ``(rank, size)`` for custom launchers; resolved once, when the dataset is
made, into ints (``DataParallelRank``), so nothing unpicklable travels to DataLoader workers and
``plan/`` never sees torch. The collectives of ``state_dict()`` and ``stats(gather=True)`` run
over every process of the default group and check replicas agree (loader/replicas.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from shardkit.loader.topology import rank_and_world

__all__ = ["DataParallel", "DataParallelRank", "as_data_parallel"]


@dataclass(frozen=True)
class DataParallelRank:
    """A resolved ``DataParallel``: this process's data-parallel ``rank`` in ``[0, size)`` and
    whether it ``reads`` (False: a pipeline stage that needs no batches)."""

    rank: int
    size: int
    reads: bool = True


@dataclass(frozen=True)
class DataParallel:
    """The data-parallel group of this process, and whether it reads data.

    Give one of: ``group`` (a ``torch.distributed`` ``ProcessGroup``: this rank's data-parallel
    group), ``group`` a ``DeviceMesh`` with ``mesh_dim`` (its data-parallel dimension's name or
    index; a 1-D mesh needs none), or ``rank`` and ``size``. None of them: the default process
    group's rank and size (plain data parallelism). ``reads=False``: this rank needs no data (a
    pipeline stage other than the first and last): it reads nothing, its loader yields nothing
    and ``len()`` is 0, and it still takes part in ``state_dict()`` and ``stats(gather=True)``.
    """

    group: Any = None
    mesh_dim: str | int | None = None
    rank: int | None = None
    size: int | None = None
    reads: bool = True

    def resolve(self) -> DataParallelRank:
        """This process's data-parallel rank and size (reads the group or mesh now)."""
        if (self.rank is None) != (self.size is None):
            raise ValueError(f"DataParallel: give both rank and size, got rank={self.rank!r} size={self.size!r}")
        if self.rank is not None and self.group is not None:
            raise ValueError("DataParallel: give a group (or mesh) or rank and size, not both")
        if not isinstance(self.reads, bool):
            raise TypeError(f"DataParallel: reads must be a bool, got {self.reads!r}")
        if self.group is None:
            if self.mesh_dim is not None:
                raise ValueError(f"DataParallel: mesh_dim={self.mesh_dim!r} without a DeviceMesh")
            rank, size = _ints(self.rank, self.size) if self.rank is not None else rank_and_world()
        elif _is_mesh(self.group):
            rank, size = _mesh_rank(self.group, self.mesh_dim)
        elif isinstance(self.group, dist.ProcessGroup):
            if self.mesh_dim is not None:
                raise ValueError("DataParallel: mesh_dim is for a DeviceMesh, not a ProcessGroup")
            rank, size = dist.get_rank(self.group), dist.get_world_size(self.group)
            if rank < 0:
                raise ValueError(f"DataParallel: this process (global rank {dist.get_rank()}) is not a "
                                 f"member of the data-parallel group it was given")
        else:
            raise TypeError(f"DataParallel: group must be a torch.distributed ProcessGroup or a DeviceMesh, "
                            f"got {type(self.group).__name__}")
        if not 0 <= rank < size:
            raise ValueError(f"DataParallel: rank {rank} is not in [0, size={size})")
        return DataParallelRank(rank, size, self.reads)


def as_data_parallel(value: Any) -> DataParallel:
    """``data_parallel=``'s value as a ``DataParallel``: one already, a ``ProcessGroup``, a 1-D
    ``DeviceMesh``, a ``(DeviceMesh, dim)`` pair or a ``(rank, size)`` pair of ints."""
    if isinstance(value, DataParallel):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        if _is_mesh(value[0]):
            return DataParallel(group=value[0], mesh_dim=value[1])
        if all(type(v) is int for v in value):
            return DataParallel(rank=value[0], size=value[1])
    if isinstance(value, dist.ProcessGroup) or _is_mesh(value):
        return DataParallel(group=value)
    raise TypeError(f"data_parallel: expected sk.DataParallel, a ProcessGroup, a DeviceMesh (or (mesh, dim)) "
                    f"or (rank, size) ints, got {value!r}")


def _ints(rank: Any, size: Any) -> tuple[int, int]:
    if type(rank) is not int or type(size) is not int:  # bool is not int here
        raise TypeError(f"DataParallel: rank and size must be ints, got {rank!r}, {size!r}")
    return rank, size


def _is_mesh(value: Any) -> bool:
    try:
        from torch.distributed.device_mesh import DeviceMesh
    except ImportError:  # a torch built without distributed support
        return False
    return isinstance(value, DeviceMesh)


def _mesh_rank(mesh: Any, dim: str | int | None) -> tuple[int, int]:
    if dim is None:
        if mesh.ndim != 1:
            raise ValueError(f"DataParallel: a {mesh.ndim}-D DeviceMesh needs mesh_dim (its data-parallel "
                             f"dimension; names: {mesh.mesh_dim_names})")
        dim = 0
    names = mesh.mesh_dim_names or ()
    if isinstance(dim, str) and dim not in names:
        raise ValueError(f"DataParallel: mesh_dim {dim!r} is not one of the mesh's dimensions {names}")
    return int(mesh.get_local_rank(dim)), int(mesh.size(dim if isinstance(dim, int) else names.index(dim)))
