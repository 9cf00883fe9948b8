"""The plans a ``StreamingDataset`` has built, by what fixes them: a small LRU.

A plan is a pure function of its params (epoch, topology, the rest of ``PlanParams``), the plan
state it resumes (G6) and, in global order, the batches per DataLoader item (P35), so those are
its key. A few are kept, not one: ``len(dataset)`` (one process), ``len(loader)`` and the
loader's iteration (its topology) each ask for their own, in turn, every epoch. Loading a state
or a worker receiving new plans clears them. Not thread-safe: one per dataset copy (each
DataLoader worker has its own).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from shardkit.plan import PlanParams
from shardkit.plan.rotation import StepPlan

KEEP = 4  # plans kept: len(dataset)'s, len(loader)'s, the iteration's, one more


class StepPlans:
    def __init__(self) -> None:
        self._plans: OrderedDict[str, StepPlan] = OrderedDict()

    def get(self, batching: Any, source: Any, params: PlanParams, resume: dict[str, Any] | None, group: int,
            share: Any = None) -> StepPlan:
        """The plan of ``params`` from ``resume``, built by ``batching`` over ``source`` if not
        kept; ``share``: this rank's share of a pack count, agreed on at every call (TB29)."""
        group = group if params.order == "global" and params.num_workers > 0 else 1  # P35: part of the key
        key = repr((params, resume, group))
        plan = self._plans.get(key)
        if plan is None:
            plan = batching.step_plan(source, params, resume, group, *([share] if share is not None else []))
            self._plans[key] = plan
            while len(self._plans) > KEEP:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
            if share is not None:
                batching.agree(plan, share)
        return plan

    def clear(self) -> None:
        self._plans.clear()
