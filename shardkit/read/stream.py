"""A consumer's samples for one epoch: plan windows → shard blocks → samples, in plan order.

``ShardOpener`` gives readers for shards: a local dataset is read in place; a remote one
through the node-local cache (one download per node, leases held while a shard is open, the
next shards of this consumer's plan prefetched) or, without a cache dir, by range requests.

Not thread-safe: one opener per consumer (DataLoader worker).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardkit.format import ShardInfo
from shardkit.format.shard_layout import ShardIndex
from shardkit.plan import Window
from shardkit.plan.any_state import SamplePlan
from shardkit.plan.global_order.order import GlobalOrderPlan
from shardkit.read.column_pieces import ColumnPiece, as_samples, is_run, join_pieces
from shardkit.read.dataset import StoredDataset
from shardkit.read.fetcher import span_chunks
from shardkit.read.open_shards import OpenShards, ShardReaders
from shardkit.read.options import ReadOptions
from shardkit.read.shard_blocks import resolve_max_block_bytes
from shardkit.read.shard_reader import SampleChunk, ShardReader
from shardkit.read.sources import LocalFileSource, StoreSource, open_checked
from shardkit.read.stats import ReadStats
from shardkit.storage import CacheItem, Prefetcher, ShardCache

log = logging.getLogger(__name__)


def cache_item(dataset: StoredDataset, shard_index: int) -> CacheItem:
    """The cache entry of a shard: keyed by dataset fingerprint + shard checksum (never a name)."""
    info = dataset.manifest.shards[shard_index]
    fingerprint = dataset.manifest.fingerprint.split(":")[-1][:16]
    return CacheItem(
        name=info.name,
        key=f"{fingerprint}-{info.checksum.split(':')[-1]}",
        num_bytes=info.num_bytes,
        verify=_checksum_verifier(info),
    )


def _checksum_verifier(info: ShardInfo) -> Any:
    """The cache's check of a download or a hit: the whole file against the manifest's checksum,
    keeping its checked index for the reader that opens it next (K45: one hash per file); the
    identity of the file it hashed, which the cache then takes as verified (K2)."""
    def verify(path: str) -> tuple[int, int, int]:
        source, _ = open_checked(path, info, fresh=True)
        try:
            st = source.stat()  # of the descriptor just hashed, not of whatever the path names now
            return st.st_dev, st.st_ino, st.st_size
        finally:
            source.close()

    return verify


class ShardOpener:
    """Open shard readers on demand, keeping the last ``keep_open`` (and their cache leases; RP1)."""

    def __init__(
        self,
        dataset: StoredDataset,
        cache: ShardCache | None = None,
        upcoming: Iterable[int] | None = None,
        keep_open: int = 2,
        prefetch_ahead: int = 2,
        stats: ReadStats | None = None,
        options: ReadOptions = ReadOptions(),
        open_shards: OpenShards[ShardReader] | None = None,
    ) -> None:
        """``open_shards``: the open readers this opener shares with others of one consumer (a
        mixture's sources, RP1); default: its own, holding ``keep_open``."""
        self.dataset = dataset
        self.options = options
        self.stats = stats if stats is not None else ReadStats()
        self.cache = cache if dataset.store.worth_caching else None
        # A cached shard stays leased (unevictable) while open: keep only the current one.
        self.keep_open = 1 if self.cache is not None else keep_open
        # A shard's reader and what closes it: the reader itself, or (a cached shard) a stack that
        # also gives its lease back.
        self._open: OpenShards[ShardReader] = (open_shards if open_shards is not None
                                               else OpenShards(2 * self.keep_open))
        # Once per opener, not per shard: a spread read opens ~spread times as many (P21).
        self._max_block_bytes = resolve_max_block_bytes()
        self._prefetcher: Prefetcher | None = None
        if self.cache is not None and upcoming is not None:
            lazy = not isinstance(upcoming, list)  # a walk, not a list: taken as needed (P35)
            items = (cache_item(dataset, i) for i in upcoming) if lazy else [cache_item(dataset, i) for i in upcoming]
            if lazy or items:
                self._prefetcher = self.cache.prefetch(dataset.store, items, max_ahead=prefetch_ahead, lazy=lazy)

    @property
    def open_limit(self) -> int:
        """Distinct shards a run may use at once: one dataset's are all its own (RP6)."""
        return self.keep_open

    def source_of(self, shard_index: int) -> int:
        return 0

    def reader(self, shard_index: int) -> ShardReader:
        found = self._open.get(self, shard_index)
        if found is not None:
            return found
        info = self.dataset.manifest.shards[shard_index]
        stack = contextlib.ExitStack() if self.cache is not None else None
        started = time.perf_counter()
        try:
            source, index = self._source(shard_index, info, stack)
            reader = ShardReader(source, info, stats=self.stats, options=self.options,
                                 max_block_bytes=self._max_block_bytes, index=index)
        except BaseException as exc:
            if stack is not None:
                stack.close()
            exc.add_note(f"while opening shard {info.name} (index {shard_index}) of {self.dataset.url}")
            raise
        self.stats.opened(shard_index, time.perf_counter() - started)
        if stack is not None:
            stack.callback(reader.close)
        # A cached shard's reader holds its file and its lease (a flock): two descriptors.
        self._open.add(self, shard_index, reader, stack if stack is not None else reader, self.keep_open,
                       descriptors=1 if stack is None else 2)
        return reader

    def _source(self, shard_index: int, info: ShardInfo,
                stack: contextlib.ExitStack | None) -> tuple[Any, ShardIndex | None]:
        """The shard's bytes, and its index when already checked (a cached shard: K45)."""
        store = self.dataset.store
        local = store.local_path(info.name)
        if local is not None:
            return LocalFileSource(local), None
        if self.cache is None or stack is None:
            return StoreSource(store, info.name, info.num_bytes), None
        item = cache_item(self.dataset, shard_index)
        if self._prefetcher is not None:
            path = stack.enter_context(self._prefetcher.open(item))
        else:
            path = stack.enter_context(
                self.cache.open(store, item.name, key=item.key, num_bytes=item.num_bytes, verify=item.verify)
            )
        # The leased path is opened again here, and may name another file by now (a member of
        # the group renamed one over it): the file this reader keeps is checked, not the path.
        source, index = open_checked(path, info)
        stack.callback(source.close)
        return source, index

    def close(self) -> None:
        self._open.close_owner(self)
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None


@dataclass
class WindowSamples:
    """The output of one plan window: samples in plan order, their global indices, pad flags."""

    samples: SampleChunk  # dicts, or a ColumnPiece from readers made with ``views``
    indices: np.ndarray
    padded: np.ndarray
    copies: np.ndarray | None = None  # copy numbers in a weighted epoch (Window.copies)


def read_window(opener: ShardReaders, window: Window, offsets: np.ndarray) -> Iterator[WindowSamples]:
    """The samples of one plan window in output order, in pieces.

    A shuffled window is decoded whole before its first sample can go out (its first output may
    sit anywhere in it: the memory/latency price of the shuffle window). A window whose order is
    a plain run (no shuffle, or a seek into a run) streams block by block instead, so the first
    batch costs a few range requests, not a window.
    """
    order, indices, padded = window.order, window.global_indices(offsets), window.padded_mask()
    if is_run(order):
        yield from _read_run(opener, window, int(order[0]), indices, padded)
        return
    # One read-ahead run across the window's spans (P21: a spread window has many short ones).
    chunks = list(span_chunks(opener, ((span.shard_index, span.start, span.end) for span in window.spans)))
    if chunks and all(isinstance(chunk, ColumnPiece) for chunk in chunks):
        joined = join_pieces(chunks)  # type: ignore[arg-type]
        if joined is not None:  # one selection of the window's columns, in output order
            yield WindowSamples(joined.select(order), indices, padded, window.copies)
            return
    decoded = [sample for chunk in chunks for sample in as_samples(chunk, opener.options.views)]
    yield WindowSamples([decoded[i] for i in order.tolist()], indices, padded, window.copies)


def _read_run(
    opener: ShardReaders, window: Window, skip: int, indices: np.ndarray, padded: np.ndarray
) -> Iterator[WindowSamples]:
    wanted_end, position, emitted = skip + len(indices), 0, 0
    ranges = []
    for span in window.spans:
        lo, hi = max(skip - position, 0), min(span.num_samples, wanted_end - position)
        position += span.num_samples
        if lo < hi:
            ranges.append((span.shard_index, span.start + lo, span.start + hi))
    for chunk in span_chunks(opener, ranges):
        part = slice(emitted, emitted + len(chunk))
        copies = None if window.copies is None else window.copies[part]
        yield WindowSamples(chunk, indices[part], padded[part], copies)
        emitted += len(chunk)


def iter_consumer(
    dataset: StoredDataset,
    plan: SamplePlan,
    consumer: int,
    start: int,
    cache: ShardCache | None = None,
    stats: ReadStats | None = None,
    options: ReadOptions = ReadOptions(),
) -> Iterator[WindowSamples]:
    """Consumer ``consumer``'s samples from position ``start`` to the end of its sequence."""
    upcoming = upcoming_shards(plan, consumer, start) if cache is not None else None
    # A spread plan (P18) reads about 1/spread of each shard: look as many more shards ahead, the
    # same samples of this consumer's own (bytes stay capped by the prefetcher's byte budget).
    ahead = 2 * plan.params.spread if plan.params.shuffle else 2
    return opened_windows(lambda: ShardOpener(dataset, cache, upcoming, prefetch_ahead=ahead, stats=stats,
                                              options=options), plan, consumer, start)


def upcoming_shards(plan: SamplePlan, consumer: int, start: int) -> Iterable[int]:
    """The shards a consumer's prefetcher fetches ahead of it, in first-read order: a list of its
    epoch's; for a global-order plan a lazy walk (``iter_shards``), taken as the prefetcher nears
    it (specs/partition.md P35: listing its whole epoch would walk every window of the sequence)."""
    if isinstance(plan, GlobalOrderPlan):
        return plan.iter_shards(consumer, start)
    return list(plan.shards_of(consumer, start))


def opened_windows(make_opener: Callable[[], Any], plan: SamplePlan, consumer: int,
                   start: int) -> Iterator[WindowSamples]:
    """The samples of consumer ``consumer``'s windows from ``start``, read through the opener
    ``make_opener()`` gives (a dataset's or a mixture's) when the stream starts; it is closed
    when the stream ends or is dropped."""
    opener = make_opener()
    offsets = plan.shard_offsets
    try:
        for window in plan.consumer_windows(consumer, start):
            yield from read_window(opener, window, offsets)
    finally:
        opener.close()
