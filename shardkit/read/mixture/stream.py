"""A consumer's samples of a mixture plan: global shards -> (source, local shard) -> samples.

The mixture plan (shardkit.plan.mixture.state) numbers the sources' shards one after another;
:class:`MixtureOpener` keeps one :class:`ShardOpener` per source (its own store, cache keys by
that dataset's fingerprint, its own prefetch list) and maps a global shard index to the right
one. Windows decode source by source; the openers share one bound on open shards (RP1), so
descriptors do not grow with the number of sources.

Not thread-safe: one opener per consumer (DataLoader worker).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from shardkit.plan.any_state import SamplePlan
from shardkit.plan.mixture.state import shard_bases
from shardkit.read.mixture.config import OpenMixture
from shardkit.read.open_shards import MAX_SHARD_DESCRIPTORS, OpenShards
from shardkit.read.options import ReadOptions
from shardkit.read.shard_reader import ShardReader
from shardkit.read.stats import ReadStats
from shardkit.read.stream import ShardOpener, WindowSamples, opened_windows, upcoming_shards
from shardkit.storage import ShardCache


class MixtureOpener:
    """Shard readers of a mixture by global shard index (``bases``: first global shard of each
    source, then the total)."""

    def __init__(self, opened: OpenMixture, bases: np.ndarray, cache: ShardCache | None = None,
                 upcoming: Iterable[int] | None = None, stats: ReadStats | None = None,
                 options: ReadOptions = ReadOptions()) -> None:
        self.options = options
        self.stats = stats if stats is not None else ReadStats()
        self._firsts = [int(b) for b in bases]  # bisected per span a run lists: no numpy call
        self._openers = []
        # One bound on open shards for all the sources together, not one per source (RP1).
        shared: OpenShards[ShardReader] = OpenShards(MAX_SHARD_DESCRIPTORS)
        lazy = upcoming is not None and not isinstance(upcoming, list)  # one walk for every source (P35)
        walks = itertools.tee(upcoming, len(opened.datasets)) if lazy and upcoming is not None else None
        for i, dataset in enumerate(opened.datasets):
            lo, hi = int(bases[i]), int(bases[i + 1])
            mine: Iterable[int] | None = None
            if walks is not None:
                mine = _in_source(walks[i], lo, hi)
            elif upcoming is not None:
                mine = [s - lo for s in upcoming if lo <= s < hi]
            self._openers.append(ShardOpener(dataset.in_this_process(), cache, mine, stats=self.stats,
                                             options=options, open_shards=shared))
        # Asked at every span a read-ahead run expands: once here, not once per source per span.
        self._keep_open = min((opener.keep_open for opener in self._openers), default=1)
        # A run may use as many shards at once as the shared bound holds, at two descriptors
        # each (a cached reader's lease); up to keep_open of any one source (RP6).
        self._open_limit = max(MAX_SHARD_DESCRIPTORS // 2, self._keep_open)

    @property
    def keep_open(self) -> int:
        """Shards of one source that may be open at once (a run across spans, fetcher.py)."""
        return self._keep_open

    @property
    def open_limit(self) -> int:
        """Shards of all the sources that a run may use at once (fetcher.py, RP6)."""
        return self._open_limit

    def source_of(self, shard_index: int) -> int:
        return bisect.bisect_right(self._firsts, shard_index) - 1

    def reader(self, shard_index: int) -> ShardReader:
        source = self.source_of(shard_index)
        return self._openers[source].reader(shard_index - self._firsts[source])

    def close(self) -> None:
        for opener in self._openers:
            opener.close()


def _in_source(walk: Iterable[int], lo: int, hi: int) -> Iterator[int]:
    """The shards of one source (global shard indices ``lo:hi``) of a lazy walk, as its own."""
    return (shard - lo for shard in walk if lo <= shard < hi)


def source_of_indices(sample_bases: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Source of each global sample index (``sample_bases``: first global sample of each source)."""
    found: np.ndarray = np.searchsorted(sample_bases, indices, side="right") - 1
    return found


def iter_mixture_consumer(opened: OpenMixture, plan: SamplePlan, consumer: int, start: int,
                          cache: ShardCache | None = None, stats: ReadStats | None = None,
                          options: ReadOptions = ReadOptions(),
                          order: Sequence[int] | None = None) -> Iterator[WindowSamples]:
    """Consumer ``consumer``'s samples of a mixture plan from position ``start`` to its end;
    ``indices`` are global (``source_of_indices`` maps them to sources). ``order``: the opened
    datasets the plan's sources are, in plan order (default: all, in the mixture's order; a
    resumed epoch may list a subset in its saved order)."""
    if order is None:
        bases = shard_bases(opened.spec())
    else:
        lengths = None if opened.lengths is None else tuple(opened.lengths[i] for i in order)
        weights = tuple((opened.weights or (None,) * len(opened.datasets))[i] for i in order)
        opened = OpenMixture(opened.mixture, tuple(opened.datasets[i] for i in order), lengths, weights)
        sizes = [0] + [len(ds.manifest.shard_sizes) for ds in opened.datasets]
        bases = np.cumsum(sizes, dtype=np.int64)
    upcoming = upcoming_shards(plan, consumer, start) if cache is not None else None
    return opened_windows(lambda: MixtureOpener(opened, bases, cache, upcoming, stats, options), plan, consumer,
                          start)
