"""The two components every streaming dataset is made of (specs/partition.md §Components).

A dataset is an **epoch source** — what one epoch is: one dataset, a weighted dataset, a mixture —
and a **batching** — what one step is: a batch of samples, a batch of token blocks. The loader
composes one of each (``loader/compose.py``); neither knows which the other is, so every
combination (token blocks over a weighted dataset, over a mixture of weighted sources, ...) is
the two components side by side, never a class of its own.

This module holds the plan-level contracts only (pure: no reading, no torch). The loader's
components add what they read (``loader/epoch_sources.py``, ``loader/batchings.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from shardkit.plan.any_state import SamplePlan
from shardkit.plan.params import PlanParams
from shardkit.plan.plan import Plan
from shardkit.plan.rotation import StepPlan


class EpochSource(Protocol):
    """What an epoch is: its multiset of elements in a seeded order, partitioned like any
    sequence (P1-P12), and the source's own part of a loader state.

    ``plan(params, resume)`` is the sample plan of ``params.epoch`` (``resume``: a validated plan
    state); ``order_plan(params)`` the one-consumer plan whose sequence is the epoch order of its
    elements (what token blocks cut, TB11). Elements are numbered by ``plan``'s global sample
    index (``Plan.shard_sizes`` of the epoch's shard list)."""

    @property
    def samples_per_epoch(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def epoch_fingerprint(self, epoch: int) -> str:
        """The fingerprint a plan state of ``epoch`` carries (checked at load, R8)."""
        ...

    def plan(self, params: PlanParams, resume: dict[str, Any] | None = None, group: int = 1) -> SamplePlan:
        """``params.order == "global"``: a ``GlobalOrderPlan`` whose workers take units of
        ``group`` global batches (P30, P35); the default order ignores ``group``."""
        ...

    def order_plan(self, params: PlanParams) -> Plan: ...

    @property
    def part_keys(self) -> frozenset[str]:
        """The loader-state keys this source writes and reads (e.g. ``sample_weights``, ``mixture``)."""
        ...

    def state_part(self, epoch: int, resume: dict[str, Any] | None, received: np.ndarray | None) -> dict[str, Any]:
        """This source's keys of a loader state at the consumed boundary; ``received``: the
        elements per source received (a mixture's tally), else None."""
        ...

    def load_part(self, state: Any) -> str:
        """Check and apply this source's part of ``state`` (a ``LoaderState``); the fingerprint
        its plan must carry."""
        ...


class Batching(Protocol):
    """What a step is: the step plan over a source's epoch (offsets counted in this batching's
    units), and the batching's own part of a loader state."""

    @property
    def yields_tokens(self) -> bool: ...

    @property
    def part_keys(self) -> frozenset[str]: ...

    def step_plan(self, source: Any, params: PlanParams, resume: dict[str, Any] | None,
                  group: int = 1) -> StepPlan: ...

    def plan_state(self, plan: Any, offsets: Sequence[int], fingerprint: str,
                   rank: int | None = None) -> dict[str, Any]:
        """The loader state's ``plan``: ``plan`` after ``offsets`` (``rank``: only that rank's
        offsets are known, R10; a global-order state needs to know, P31)."""
        ...

    def state_part(self, plan: Any, offsets: Sequence[int]) -> dict[str, Any]: ...

    def load_part(self, state: Any, source: Any) -> None:
        """Check and apply this batching's part of ``state`` (a ``LoaderState``)."""
        ...
