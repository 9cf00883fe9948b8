"""One int64 row per data-parallel rank, gathered over every process (P24-P25 in specs/partition.md).

With tensor or pipeline parallelism several processes share one data-parallel rank (its
*replicas*); the default group has more processes than the plan has ranks. Each process sends
``[reads, dp_rank, dp_size, len(row)]`` and then ``[..., *row]`` by ``all_gather`` over the
default group (the same collectives on every process, whatever the groups; the first makes a
difference in length an error, not a failed collective); then every process checks, on the same
gathered rows, that all agree on ``dp_size``, that every data-parallel rank has a reader and
that the readers of one data-parallel rank sent identical rows — else a ``StateError`` naming
the ranks, raised on every process alike (no process is left waiting in a collective).
Processes that read nothing (``reads=0``) take part and are left out of the result.
"""

from __future__ import annotations

import torch.distributed as dist

from shardkit.errors import StateError
from shardkit.loader.collectives import all_gather_ints
from shardkit.loader.topology import Topology

_HEAD = 4  # reads, dp_rank, dp_size, row length


def gather_by_dp_rank(row: list[int], topology: Topology, reads: bool, what: str) -> list[list[int]]:
    """Each data-parallel rank's ``row`` (index: dp rank), over every process; collective when
    ``torch.distributed`` is initialized. ``what`` names the rows in errors ("consumed offsets")."""
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_world_size() == 1:
        if topology.world_size > 1:
            raise StateError(f"gathering the {what} of {topology.world_size} data-parallel ranks needs "
                             f"torch.distributed initialized (every process calls it at the same step)")
        return [list(row)]
    head = [int(reads), topology.rank, topology.world_size, len(row)]
    heads = all_gather_ints(head)  # the row lengths first: all_gather needs one shape on every process
    lengths = {rank: h[3] for rank, h in enumerate(heads)}
    if len(set(lengths.values())) != 1:
        raise StateError(f"the {what} of the processes have different lengths {lengths} (global rank: "
                         f"length): every process needs the same num_workers")
    return by_dp_rank(all_gather_ints(head + list(row)), what)




def by_dp_rank(gathered: list[list[int]], what: str) -> list[list[int]]:
    """The checks of the module docstring on ``gathered`` (one row per global rank)."""
    sizes = {row[2] for row in gathered}
    if len(sizes) != 1:
        seen = {rank: row[2] for rank, row in enumerate(gathered)}
        raise StateError(f"ranks disagree on the data-parallel size: {seen} (global rank: dp size)")
    size = sizes.pop()
    readers: dict[int, list[int]] = {}
    for rank, row in enumerate(gathered):
        if row[0]:
            readers.setdefault(row[1], []).append(rank)
    missing = [dp for dp in range(size) if dp not in readers]
    if missing:
        raise StateError(f"no rank reads data-parallel ranks {missing} of {size} (ranks reading: "
                         f"{ {dp: ranks for dp, ranks in sorted(readers.items())} }): every data-parallel "
                         f"rank needs at least one process with reads=True")
    out = []
    for dp in range(size):
        first, *others = readers[dp]
        for rank in others:
            if gathered[rank] != gathered[first]:
                raise StateError(
                    f"ranks {first} and {rank} are replicas of data-parallel rank {dp} (they receive the "
                    f"same batches) but their {what} differ: rank {first} {gathered[first][_HEAD:]}, "
                    f"rank {rank} {gathered[rank][_HEAD:]}; every replica must take the same steps")
        out.append(gathered[first][_HEAD:])
    return out
