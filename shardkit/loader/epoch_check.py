"""Surface ``shardkit.plan.check_epoch_yield`` to the person training (specs/partition.md P16, P17).

A dataset smaller than one batch (``tail="drop"``) yields no batch on any topology:
``StreamingDataset`` raises ``PlanError`` at construction. What depends on the topology, known
only when the plan is built (an epoch with no batch because the ranks' share is below a batch,
or a large dropped share), is logged once per training process, never from DataLoader workers:
the remainder after an elastic resume, or a deliberately tiny smoke run, may legitimately be
empty, and every rank of a job would otherwise stop on it.
"""

from __future__ import annotations

import functools
import logging

from shardkit.errors import PlanError
from shardkit.loader.topology import worker_slot
from shardkit.plan import PlanParams, check_epoch_yield
from shardkit.plan.any_state import SamplePlan

log = logging.getLogger("shardkit.loader")


def check_plan(plan: SamplePlan) -> None:
    """Log once (training process only) when ``plan``'s fresh epoch yields no batch or drops a
    large share."""
    problem = check_epoch_yield(plan.num_source_samples, plan.params, plan.level)
    if problem is not None:
        log_once(problem.message)


def check_dataset(num_samples: int, params: PlanParams) -> None:
    """Raise if fewer samples than one batch (no batch on any topology, with ``tail="drop"``)."""
    problem = check_epoch_yield(num_samples, params)
    if problem is not None and problem.empty:
        raise PlanError(problem.message)


def log_once(message: str) -> None:
    """Log ``message`` once per training process (workers would repeat it)."""
    if worker_slot() == (0, 0):
        _log_once(message)


@functools.cache
def _log_once(message: str) -> None:
    log.warning(message)
