"""Surface ``shardkit.plan.check_epoch_yield`` to the person training (specs/partition.md P13, P14).

An epoch that yields no batch raises ``PlanError`` where the plan is first built: in
``StreamingDataset`` (when the dataset is smaller than one batch) or at ``iter``/``len`` of the
loader (when the ranks' share is). A large dropped share is logged once per training process,
never from DataLoader workers.
"""

from __future__ import annotations

import functools
import logging

from shardkit.errors import PlanError
from shardkit.loader.topology import worker_slot
from shardkit.plan import Plan, PlanParams, check_epoch_yield

log = logging.getLogger("shardkit.loader")


def check_plan(plan: Plan) -> None:
    """Raise if ``plan``'s fresh epoch yields no batch; log a large dropped share once."""
    _surface(plan.num_source_samples, plan.params, plan.level)


def check_dataset(num_samples: int, params: PlanParams) -> None:
    """Raise if fewer samples than one batch (no batch on any topology, with ``tail="drop"``)."""
    problem = check_epoch_yield(num_samples, params)
    if problem is not None and problem.empty:
        raise PlanError(problem.message)


def _surface(num_source: int, params: PlanParams, level: int) -> None:
    problem = check_epoch_yield(num_source, params, level)
    if problem is None:
        return
    if problem.empty:
        raise PlanError(problem.message)
    if worker_slot() == (0, 0):  # the training process: workers would repeat it
        _log_once(problem.message)


@functools.cache
def _log_once(message: str) -> None:
    log.warning(message)
