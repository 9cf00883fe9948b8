"""Loader statistics (G10, docs/guarantees.md): where the time goes and whether data keeps up.

Workers: ``WorkerStats`` counts, per consumer, the time spent opening shards (cache downloads,
index reads), reading blocks, decoding them and collating, plus cache counters; every batch
carries a ``snapshot()`` of them to the training process (in its ``BatchMeta``, beside the
consumed boundary, which is not a statistic and never travels in here).
Training process: ``LoaderStats`` records each step's wait for the next batch, keeps the latest
snapshot per consumer, and warns once when the loop stalls for several steps in a row, naming
the likely stage. Cheap by design: a few ``perf_counter`` calls per batch.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardkit.loader.transfer.meta import BatchMeta
from shardkit.read import ReadStats
from shardkit.storage import CacheStats

log = logging.getLogger(__name__)

#: A worker's cache download counters (``CacheStats``, K20–K22), summed into ``stats()["cache"]``.
DOWNLOAD_COUNTERS = ("download_parts", "download_retries", "download_throttled", "download_hedged")
# Layout of a worker's per-batch snapshot (``WorkerStats.snapshot``).
SNAPSHOT_FIELDS = (
    "done_time", "fetch_s", "io_s", "decode_s", "collate_s",
    "raw_bytes", "cache_hits", "cache_misses", "download_bytes", "download_s", "fresh_buffers",
    *DOWNLOAD_COUNTERS, "slowest_open_s", "slowest_shard",
)
_COUNTERS = SNAPSHOT_FIELDS[1:-2]  # summed over consumers; the last two are a maximum and its shard
#: What ``likely_stage`` names, in a fixed order (the cross-rank view sends the position).
STAGES = (
    "storage (shard downloads / cache waits)", "block reads", "decode (decompress + unpack)", "collate",
    "transfer to the training process",
)


@dataclass
class WorkerStats:
    cache: CacheStats | None = None
    read: ReadStats = field(default_factory=ReadStats)
    collate_seconds: float = 0.0
    fresh_buffers: int = 0  # batches that could not use a slot of the shared ring (X5)

    def snapshot(self) -> tuple[float, ...]:
        """The counters now, in ``SNAPSHOT_FIELDS`` order."""
        cache = self.cache
        return (
            time.monotonic(),
            self.read.fetch_seconds, self.read.io_seconds, self.read.decode_seconds, self.collate_seconds,
            self.read.raw_bytes,
            cache.hits if cache else 0, cache.misses if cache else 0,
            cache.download_bytes if cache else 0, cache.download_seconds if cache else 0.0,
            self.fresh_buffers,
            *((cache.parts, cache.retries, cache.throttled, cache.hedged) if cache else (0, 0, 0, 0)),
            self.read.slowest_open_seconds, self.read.slowest_shard,
        )


@dataclass
class LoaderStats:
    """Per-step waits and per-consumer snapshots of the current iteration; ``summary()`` is JSON-able."""

    stall_threshold: float = 0.5  # seconds a step may wait before it counts as a stall
    stall_steps: int = 5  # consecutive stalls before one warning
    waits: list[float] = field(default_factory=list)
    transfers: list[float] = field(default_factory=list)
    samples: int = 0
    tokens: int | None = None  # effective (non-padding) token inputs received, token blocks only (TB9)
    padding: int = 0  # padding slots received, token blocks only
    started: float = field(default_factory=time.perf_counter)
    consumers: dict[int, tuple[float, ...]] = field(default_factory=dict)  # latest snapshot of each
    _stalls_in_row: int = 0
    _warned: bool = False

    def reset(self) -> None:
        self.waits.clear()
        self.transfers.clear()
        self.consumers.clear()
        self.samples = 0
        self.tokens = None
        self.padding = 0
        self.started = time.perf_counter()
        self._stalls_in_row = 0
        self._warned = False

    def step(self, wait: float, num_samples: int, meta: BatchMeta | None, in_group: bool = False,
             tokens: tuple[int, int] | None = None) -> None:
        """``in_group``: the batch arrived with the previous one (a group, X8); its wait says
        nothing about stalls, so it neither counts as one nor breaks a run of them.
        ``tokens``: a token-block batch's ``(num_tokens, num_padding)`` (TB9)."""
        self.waits.append(wait)
        self.samples += num_samples
        if tokens is not None:
            self.tokens = (self.tokens or 0) + tokens[0]
            self.padding += tokens[1]
        if meta is not None and meta.stats:
            self.consumers[meta.consumer] = meta.stats
            if not in_group:  # a batch behind the first of its group also waited for the others
                self.transfers.append(max(0.0, time.monotonic() - meta.stats[0]))
        if in_group:
            return
        if wait < self.stall_threshold:
            self._stalls_in_row = 0
            return
        self._stalls_in_row += 1
        if self._stalls_in_row >= self.stall_steps and not self._warned:
            self._warned = True
            log.warning(
                "data stall: the training loop waited >= %.3f s for data on %d steps in a row (last %.3f s); "
                "likely stage: %s. See loader.stats() or run `shardkit bench`.",
                self.stall_threshold, self._stalls_in_row, wait, self.likely_stage(),
            )

    def stages(self) -> dict[str, float]:
        """Seconds per stage summed over consumers (worker-side), plus transfer to this process."""
        totals = dict.fromkeys(_COUNTERS, 0.0)
        for snapshot in self.consumers.values():
            for i, name in enumerate(_COUNTERS, start=1):
                totals[name] += snapshot[i]
        return totals

    def likely_stage(self) -> str:
        totals = self.stages()
        transfer = float(np.sum(self.transfers)) if self.transfers else 0.0
        values = (totals["fetch_s"], totals["io_s"], totals["decode_s"], totals["collate_s"], transfer)
        times = dict(zip(STAGES, values, strict=True))
        return max(times, key=lambda k: times[k])

    def slowest_open(self) -> tuple[float, int]:
        """The longest shard open seen by any consumer of this rank, and that shard (-1: none)."""
        found = [(snapshot[-2], int(snapshot[-1])) for snapshot in self.consumers.values()
                 if len(snapshot) == len(SNAPSHOT_FIELDS)]
        return max(found, default=(0.0, -1))

    def summary(self) -> dict[str, Any]:
        waits = np.asarray(self.waits) if self.waits else np.zeros(1)
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        totals = self.stages()
        transfers = np.asarray(self.transfers) if self.transfers else np.zeros(1)
        return {
            "steps": len(self.waits),
            "samples": self.samples,
            "samples_per_s": self.samples / elapsed,
            "decoded_bytes_per_s": totals["raw_bytes"] / elapsed,
            "wait_p50_s": float(np.percentile(waits, 50)),
            "wait_p99_s": float(np.percentile(waits, 99)),
            "wait_max_s": float(waits.max()),
            "wait_total_s": float(waits.sum()),
            "wait_first_s": float(waits[0]),  # to the first batch: worker start-up, first shard opens
            "transfer_p50_s": float(np.percentile(transfers, 50)),
            "elapsed_s": elapsed,
            "stages_s": {k: totals[k] for k in ("fetch_s", "io_s", "decode_s", "collate_s")},
            "cache": {k: totals[k] for k in ("cache_hits", "cache_misses", "download_bytes", "download_s",
                                             *DOWNLOAD_COUNTERS)},
            # batches copied into a fresh buffer because every ring slot was still held by this
            # process (batches kept alive by the loop), or the batch was bigger than a slot
            "fresh_buffers": int(totals["fresh_buffers"]),
            "consumers": len(self.consumers),
            "likely_bottleneck": self.likely_stage() if self.waits else None,
            **self._token_summary(elapsed),
        }

    def _token_summary(self, elapsed: float) -> dict[str, Any]:
        """Effective tokens received, per second, and the padding share of the slots (TB9)."""
        if self.tokens is None:
            return {}
        slots = self.tokens + self.padding
        return {"tokens": self.tokens, "tokens_per_s": self.tokens / elapsed,
                "padding_fraction": self.padding / slots if slots else 0.0}
