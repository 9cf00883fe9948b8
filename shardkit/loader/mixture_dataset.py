"""``MixtureDataset``: a :class:`StreamingDataset` over a mixture of datasets (specs/mixture.md).

The plan of each epoch is the mixture plan (shardkit.plan.mixture_state): the partition,
equal steps, drop/pad, the consumed boundary and same-topology/elastic resume work exactly as
for one dataset. Batches may carry ``_source`` (int64, the source index of each sample, with
``with_source=True``). The loader state's plan fingerprint is the mixture's
(:meth:`MixSpec.fingerprint`): resuming with other weights, sources or epoch size is refused
through the loader (the plan layer's ``resume_mixture`` supports it; see the spec's MX8).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch

from shardkit.loader.batcher import BatchCut
from shardkit.loader.dataset import StreamingDataset
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.transfer.arena import alloc_like
from shardkit.plan import Plan, PlanParams, shard_offsets
from shardkit.plan.mixture_state import mixture_plan, mixture_shard_sizes, shard_bases
from shardkit.read.mixture import Mixture, open_mixture
from shardkit.read.mixture_stream import iter_mixture_consumer, source_of_indices
from shardkit.read.options import ReadOptions
from shardkit.read.stream import WindowSamples
from shardkit.storage import ShardCache


class MixtureDataset(StreamingDataset):
    """Batches of ``batch_size`` samples drawn from several datasets by weight, exactly once per
    element of each epoch's multiset. Keyword arguments as :class:`StreamingDataset`, plus
    ``with_source``."""

    def __init__(self, mixture: Mixture, *, batch_size: int, with_source: bool = False,
                 storage_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.opened = open_mixture(mixture, storage_options)
        self.spec = self.opened.spec()
        self.with_source = with_source
        # The parent holds the first source as ``dataset`` (its store, its fork handling).
        super().__init__(self.opened.datasets[0].url, batch_size=batch_size, storage_options=storage_options,
                         **kwargs)
        bases = shard_bases(self.spec)
        self._sample_bases = shard_offsets(mixture_shard_sizes(self.spec))[bases]

    @property
    def fingerprint(self) -> str:
        return self.spec.fingerprint()

    def plan(self, epoch: int, world_size: int, num_workers: int, resume: dict[str, Any] | None = None) -> Plan:
        params: PlanParams = replace(self.params, epoch=epoch, world_size=world_size, num_workers=num_workers)
        key = repr((params, resume))
        plan = self._plans.get(key)
        if plan is None:
            plan = mixture_plan(self.spec, params, resume)
            self._plans = {key: plan}
        return plan

    def _shard_cache(self) -> ShardCache | None:
        if self.options.cache_dir is None or all(ds.store.is_local for ds in self.opened.datasets):
            return None
        if self._cache is None:
            self._cache = ShardCache(self.options.cache_dir, self.options.cache_limit)
        return self._cache

    def _read_consumer(self, plan: Plan, consumer: int, start: int, cache: ShardCache | None,
                       stats: WorkerStats, options: ReadOptions) -> Iterator[WindowSamples]:
        return iter_mixture_consumer(self.opened, plan, consumer, start, cache, stats.read, options)

    def _collate(self, cut: BatchCut) -> Any:
        batch = super()._collate(cut)
        if isinstance(batch, dict) and self.with_source:
            batch["_source"] = alloc_like(source_of_indices(self._sample_bases, cut.indices), torch.int64)
        return batch
