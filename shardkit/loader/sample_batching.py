"""The batching of samples: a step is ``batch_size`` elements of the source's epoch (G2, G3).

The step plan is the source's sample plan; a consumer's batches are its samples in plan order
(``source.read``), transformed (``transform``, in the worker, before collation), cut into batches
(``cut_batches``, pure) and collated (``collate_fn``, default ``collate_samples``) by the
``Emitter``. A plain or weighted dataset and a mixture batch the same way: what differs is
their source.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from shardkit.loader.batcher import BatchCut, cut_batches
from shardkit.loader.collate import collate_samples
from shardkit.loader.collate_columns import collate_pieces
from shardkit.loader.dataset_source import separate_copies
from shardkit.loader.emitter import Emitter
from shardkit.loader.epoch_check import check_plan
from shardkit.loader.topology import worker_slot
from shardkit.loader.transfer.arena import alloc_like
from shardkit.loader.transforms import Transform, takes_context, transformed
from shardkit.plan import PlanParams, plan_to_state
from shardkit.plan.any_state import SamplePlan
from shardkit.plan.global_order.order import GlobalOrderPlan
from shardkit.plan.global_order.state import global_plan_to_state
from shardkit.read.column_pieces import ColumnPiece, as_samples
from shardkit.read.options import ReadOptions
from shardkit.storage import ShardCache

Decorate = Callable[[Any, BatchCut, bool], None]  # a source's keys added to a collated batch


class SampleBatching:
    """Batches of samples: ``transform`` maps one sample dict (``transform(sample)`` or
    ``transform(sample, ctx)``, decided from its signature once), ``collate_fn`` a list of samples
    to a batch. Both must be picklable for spawn-started workers."""

    yields_tokens = False
    part_keys: frozenset[str] = frozenset()

    def __init__(self, transform: Transform | None = None,
                 collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None) -> None:
        self.transform = transform
        self._transform_context = transform is not None and takes_context(transform)  # ctx (SampleContext)?
        self.collate_fn = collate_fn or collate_samples

    # ---- the plan and the state -----------------------------------------------------------------
    def step_plan(self, source: Any, params: PlanParams, resume: dict[str, Any] | None,
                  group: int = 1) -> SamplePlan:
        """The source's sample plan; ``group`` (batches per DataLoader item) deals a global-order
        plan's batches to the workers (P30)."""
        plan: SamplePlan = source.plan(params, resume, group)
        check_plan(plan)  # no batch for this topology, or a large drop: logged once (P16, P17)
        if worker_slot() == (0, 0) and params.order == "shard":  # P20 judges the default order's batches (P35)
            source.warn_quality(plan)
        return plan

    def saved_plan(self, source: Any, resume: dict[str, Any]) -> SamplePlan:
        """The plan that saved ``resume``, at its offsets (its own topology and batch size; a
        global-order one from its position, R16)."""
        plan: SamplePlan = source.plan(PlanParams.from_dict(resume["params"]), resume)
        return plan

    def plan_state(self, plan: Any, offsets: Sequence[int], fingerprint: str,
                   rank: int | None = None) -> dict[str, Any]:
        """The plan state after ``offsets``: per consumer, or one position in global order (P31,
        R16; ``rank``: count that rank's consumers only, its own unfinished iteration, R10)."""
        if isinstance(plan, GlobalOrderPlan):
            return global_plan_to_state(plan, list(offsets), fingerprint, rank)
        return plan_to_state(plan, list(offsets), fingerprint)

    def state_part(self, plan: Any, offsets: Sequence[int]) -> dict[str, Any]:
        return {}

    def load_part(self, state: Any, source: Any) -> None:
        """Nothing of its own in a state."""

    def payload(self) -> dict[str, Any]:
        return {}

    def receive(self, payload: dict[str, Any]) -> bool:
        return False

    def transfer_batches(self) -> int | None:
        return None

    def prefetch_batches(self, num_workers: int, params: PlanParams) -> int | None:
        return None

    def step_counts(self, batch: Any) -> tuple[Any, Any] | None:
        """What a step adds to the token counters of ``stats()`` (none for samples)."""
        return None

    # ---- a consumer's batches (in its process) ----------------------------------------------------
    def batches(self, source: Any, plan: SamplePlan, emitter: Emitter, cache: ShardCache | None,
                batch_size: int, with_index: bool) -> Iterator[Any]:
        """The consumer's batches from the emitter's position, emitted."""
        # The default collation copies every value into the batch at once, so large samples may
        # come as views of the (verified) block instead of copies (format/sample_views.py), and
        # column blocks as their columns (loader/collate_columns.py).
        views = self.transform is None and self.collate_fn is collate_samples
        options = ReadOptions(read_ahead=_spare_core(plan.params.num_workers), views=views)
        windows = source.read(plan, emitter.consumer, emitter.position, cache, emitter.stats, options, batch_size)
        if self.transform is not None:
            if source.repeats:  # every copy of a sample its own dict (SW8, MX17)
                windows = map(separate_copies, windows)
            windows = transformed(windows, self.transform, self._transform_context, plan.params.epoch,
                                  plan.params.seed)
        return emitter.emit_cuts(cut_batches(windows, batch_size, emitter.consumer))

    def collate_for(self, source: Any, pad: bool, with_index: bool) -> Callable[[BatchCut], Any]:
        """How the emitter collates a cut of ``source``'s samples."""
        return functools.partial(self.collate, source.decorate, pad=pad, with_index=with_index)

    def collate(self, decorate: Decorate | None, cut: BatchCut, pad: bool, with_index: bool) -> Any:
        """``decorate``: adds the keys of a mixture (its source's numbering and counts, X9)."""
        parts, batch = cut.parts, None
        if all(isinstance(part, ColumnPiece) for part in parts):  # only with the default collation
            batch = collate_pieces(parts)  # type: ignore[arg-type]
        if batch is None:
            batch = self.collate_fn([sample for part in parts for sample in as_samples(part, views=True)])
        if isinstance(batch, dict):
            if pad:
                batch["_padded"] = alloc_like(cut.padded, torch.bool)
            if with_index:
                batch["_index"] = alloc_like(cut.indices, torch.int64)
        if decorate is not None:  # a mixture's keys (and counts, whatever collate_fn made)
            decorate(batch, cut, with_index)
        return batch


def _spare_core(num_workers: int) -> bool:
    """Whether a reading process has a core to spare for a read-ahead thread: the consumers
    (the workers, or the training process itself) and the training process need one each, on
    every rank of this node (``LOCAL_WORLD_SIZE``, set by torchrun)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        local_ranks = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    except ValueError:
        local_ranks = 1
    busy = local_ranks * (max(num_workers, 1) + (1 if num_workers > 0 else 0))
    return cores > busy
