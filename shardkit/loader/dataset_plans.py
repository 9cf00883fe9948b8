"""What ``ShardLoader`` asks a ``StreamingDataset`` in the training process: the (cached) plan of
an epoch, the batches a rank still yields, and the dataset's part of a loader state.

These are the hooks the kinds of dataset override: a ``WeightedDataset`` plans its weighted
multiset (``level0``), a ``MixtureDataset`` its mixture's epoch and ``mixture`` part, a
``TokenDataset`` a token plan (``step_plan``, offsets in blocks) and its ``tokens`` part.
``StreamingDataset`` (loader/dataset.py) mixes them in and sets the attributes declared here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from shardkit.errors import StateError
from shardkit.loader.epoch_check import check_plan
from shardkit.loader.mixture_state import SourceTally
from shardkit.loader.topology import worker_slot
from shardkit.plan import Plan, PlanParams, build_plan, plan_to_state
from shardkit.plan.plan import base_plan
from shardkit.plan.quality import warn_if_poor_labels, warn_if_unshuffled
from shardkit.plan.rotation import StepPlan
from shardkit.read import StoredDataset
from shardkit.read.field_values import read_label_codes


class DatasetPlans:
    """The plans of a dataset's epochs and its part of a loader state (a mixin of
    ``StreamingDataset``; the last plan built is kept in ``_plans``)."""

    params: PlanParams
    dataset: StoredDataset
    _plans: dict[str, Plan]
    quality_field: str | None = None  # P20: measure this field's labels per batch (opt-in)
    _quality_measured = False

    @property
    def fingerprint(self) -> str:
        return self.dataset.manifest.fingerprint

    # ---- plans --------------------------------------------------------------------------------
    def plan(self, epoch: int, world_size: int, num_workers: int, resume: dict[str, Any] | None = None) -> Plan:
        """The (cached) plan of ``epoch`` for a topology; ``resume`` = a plan state (G6)."""
        params = replace(self.params, epoch=epoch, world_size=world_size, num_workers=num_workers)
        key = repr((params, resume))
        plan = self._plans.get(key)
        if plan is None:
            plan = build_plan(self.dataset.manifest.shard_sizes, params, resume, self.level0)
            check_plan(plan)  # no batch for this topology, or a large drop: logged once (P16, P17)
            if worker_slot() == (0, 0):  # P20: in the training process, once per dataset
                self.warn_quality(plan)
            self._plans = {key: plan}
        return plan

    def warn_quality(self, plan: Plan) -> None:
        """P20: from the plan's shard mixing; with ``quality_field``, from that field's values
        instead (``shardkit plan --quality``'s measure: all labels read once, on the first plan
        this dataset builds in this process)."""
        if self.quality_field is None:
            warn_if_unshuffled(self.dataset.manifest, plan)
        elif not self._quality_measured:
            self._quality_measured = True
            labels = read_label_codes(self.dataset, self.quality_field)
            warn_if_poor_labels(self.fingerprint, plan, labels, self.quality_field)

    def level0(self, shard_sizes: np.ndarray, params: PlanParams) -> Plan:
        """Level 0 of an epoch's plan (a ``WeightedDataset`` plans its weighted multiset)."""
        return base_plan(shard_sizes, params)

    def step_plan(self, epoch: int, world_size: int, num_workers: int,
                  resume: dict[str, Any] | None = None) -> StepPlan:
        """What ``ShardLoader`` counts steps and consumed offsets with: the sample plan here,
        a token plan (offsets in blocks) for token blocks."""
        return self.plan(epoch, world_size, num_workers, resume)

    def num_batches(self, epoch: int, rank: int, world_size: int, num_workers: int,
                    resume: dict[str, Any] | None = None) -> int:
        """Batches rank ``rank`` still yields this epoch (all ranks get the same number)."""
        plan = self.step_plan(epoch, world_size, num_workers, resume)
        batch = self.params.batch_size
        width = max(num_workers, 1)
        consumers = range(rank * width, (rank + 1) * width)
        return sum(plan.num_batches(c) - plan.start_offsets[c] // batch for c in consumers)

    # ---- the dataset's part of a loader state (a mixture adds its own: mixture_dataset.py) ----
    def state_fingerprint(self, epoch: int) -> str:
        """The fingerprint the loader state's plan of ``epoch`` carries."""
        return self.fingerprint

    def state_part(self, epoch: int, resume: dict[str, Any] | None, received: Any) -> dict[str, Any]:
        """Keys a loader state adds for this dataset (none for one dataset)."""
        return {}

    def plan_state(self, plan: Any, offsets: list[int], epoch: int) -> dict[str, Any]:
        """The loader state's ``plan``: ``plan`` (from ``step_plan``) after ``offsets``."""
        return plan_to_state(plan, offsets, self.state_fingerprint(epoch))

    def extra_state(self, plan: Any, offsets: list[int]) -> dict[str, Any]:
        """Keys a loader state adds for this kind of dataset at ``offsets`` (token blocks)."""
        return {}

    def load_state_part(self, state: dict[str, Any]) -> str:
        """Apply the dataset's part of a loader state; returns the fingerprint its plan must carry."""
        if "sample_weights" in state:
            raise StateError("loader state: saved with sample weights (it has a 'sample_weights' key); "
                             "resume it with the same sample_weights= (specs/sample-weights.md SW7)")
        if "tokens" in state:
            raise StateError("loader state: saved by a token-block dataset (it has a 'tokens' key); resume "
                             "it with the same tokens=sk.TokenBlocks(...)")
        if "mixture" in state:
            raise StateError("loader state: saved by a mixture (it has a 'mixture' key); resume it with "
                             "the mixture (sk.StreamingDataset(mixture) or sk.MixtureDataset)")
        return self.fingerprint

    def prefetch_batches(self, num_workers: int) -> int | None:
        """Batches each of ``num_workers`` workers keeps in flight when ``ShardLoader`` is given no
        ``prefetch_factor`` (None: the loader's default; a mixture asks for more, MX15)."""
        return None

    def transfer_batches(self) -> int | None:
        """Batches per DataLoader item when ``ShardLoader`` is given no ``batches_per_transfer``
        (None: the loader's default, X8; token blocks send more, their batches being cheap to make)."""
        return None

    def new_tally(self) -> SourceTally | None:
        """What counts received samples per source at the consumed boundary (mixtures only)."""
        return None
