"""What travels beside a batch's tensors (X9): its consumed boundary, as exact integers, and a
snapshot of its worker's stats. Under ``META_KEY`` in the batch dict; ``ShardLoader`` takes it
out before the training loop sees the batch."""

from __future__ import annotations

from typing import NamedTuple

META_KEY = "_shardkit"


class BatchMeta(NamedTuple):
    """``consumer`` delivered its samples up to ``position`` (of its epoch ``epoch`` sequence)
    with this batch; ``stats``: the worker's ``WorkerStats.snapshot()`` when it was made;
    ``cursor``: a token-block consumer's cutter state at ``position`` as ints (TB28), else empty;
    ``head``: on the consumer's first batch of an iteration, its head (loader/resume_check.py),
    else ()."""

    consumer: int
    position: int
    epoch: int
    stats: tuple[float, ...] = ()
    cursor: tuple[int, ...] = ()
    head: tuple[int, ...] = ()  # only on a consumer's first batch of an iteration: what it holds (R19)
