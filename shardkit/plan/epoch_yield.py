"""Does a fresh epoch yield what its caller expects? (specs/partition.md P16, P17)

A batch size larger than a rank's share gives ``tail="drop"`` an epoch of zero steps: nothing to
train on, and nothing said. Pure: returns what is wrong; the loader raises or logs it and
``shardkit plan`` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardkit.plan.params import PlanParams
from shardkit.plan.partition import steps_per_rank

#: ``tail="drop"`` dropping more than this share of an epoch's samples is reported (P17).
DROP_WARNING_FRACTION = 0.1


@dataclass(frozen=True)
class YieldProblem:
    """``empty``: no rank gets a single batch (P16); else a large share is dropped (P17)."""

    empty: bool
    message: str


def check_epoch_yield(num_source: int, params: PlanParams, level: int = 0) -> YieldProblem | None:
    """The problem with an epoch of ``num_source`` samples under ``params``, or None.

    Only fresh epochs (``level`` 0) are judged: the remainder of an elastic resume may rightly
    be shorter than a step. An empty dataset is not a batch-size problem either.
    """
    if level != 0 or num_source <= 0:
        return None
    ranks, batch = params.world_size, params.batch_size
    step = ranks * batch
    steps = steps_per_rank(num_source, params)
    where = (f"{num_source} samples, {ranks} rank(s) x {params.workers_per_rank} worker(s), "
             f"batch_size {batch}, tail={params.tail!r}")
    if steps == 0:
        fit = (f"batch_size <= {num_source // ranks}" if num_source >= ranks
               else f"at most {num_source} rank(s)")
        return YieldProblem(True, f"the epoch yields no batch ({where}): one step takes world_size x "
                                  f"batch_size = {step} samples; use tail='pad' (repeats "
                                  f"{step - num_source} samples to fill one step) or {fit}")
    dropped = num_source - steps * step
    if params.tail == "drop" and dropped > DROP_WARNING_FRACTION * num_source:
        return YieldProblem(False, f"tail='drop' drops {dropped} of {num_source} samples "
                                   f"({dropped / num_source:.0%}) every epoch ({where}, {steps} "
                                   "step(s) per rank); use tail='pad' or a smaller batch_size")
    return None
