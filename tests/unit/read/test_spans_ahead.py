"""One read-ahead run across a consumer's spans (read/fetcher.py, specs/partition.md P21):
the next span's first block is already with the helper when the consumer reaches it (counted
in ``ReadStats``, not timed), the samples are those of span-by-span reads, and the run opens no
more shards at once than the opener keeps open (one lease for a cached dataset, P19)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.plan import PlanParams, build_plan
from shardkit.read import ReadOptions, open_dataset
from shardkit.read.column_pieces import as_samples
from shardkit.read.dataset import StoredDataset
from shardkit.read.fetcher import span_chunks
from shardkit.read.shard_blocks import ShardBlocks
from shardkit.read.stats import ReadStats
from shardkit.read.stream import ShardOpener, iter_consumer
from shardkit.storage.memory_store import MemoryStore
from tests.helpers.files import copy_into

SHARDS, PER_SHARD = 4, 120  # at least: shards of 32 KiB of ~200-byte samples


def write_dataset(folder: str) -> None:
    rng = np.random.default_rng(3)
    with sk.ShardWriter(folder, shard_size="32KiB", block_size=2048, compression="zstd") as writer:
        for i in range(SHARDS * 180):
            writer.write({"id": i, "tokens": rng.integers(0, 1 << 30, size=50, dtype=np.int32)})


def first_ids(dataset) -> list[int]:
    return [0, *np.cumsum(dataset.manifest.shard_sizes).tolist()]


def ids(opener: ShardOpener, spans: list[tuple[int, int, int]]) -> list[int]:
    return [int(s["id"]) for chunk in span_chunks(opener, spans) for s in as_samples(chunk, False)]


def test_the_next_spans_first_block_is_fetched_ahead(tmp_path) -> None:
    write_dataset(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    assert len(dataset.manifest.shards) >= SHARDS and min(dataset.manifest.shard_sizes[:SHARDS]) >= PER_SHARD
    spans = [(0, 10, 30), (1, 40, 60), (0, 70, 90), (2, 0, 15), (3, 100, 120)]
    first = first_ids(dataset)
    want = [first[shard] + i for shard, start, end in spans for i in range(start, end)]
    plain = ShardOpener(dataset, stats=ReadStats())
    assert ids(plain, spans) == want and plain.stats.ahead_blocks == 0
    stats = ReadStats()
    ahead = ShardOpener(dataset, stats=stats, options=ReadOptions(read_ahead=True))
    try:
        assert ids(ahead, spans) == want
        # every span but the first starts with a block the helper fetched (small blocks: room)
        assert stats.span_starts_ahead == len(spans) - 1
        assert stats.blocks == plain.stats.blocks and stats.raw_bytes == plain.stats.raw_bytes
        assert len(ahead._open) <= ahead.keep_open
    finally:
        ahead.close()
        plain.close()


def test_one_open_shard_keeps_the_run_inside_it(tmp_path) -> None:
    """RP6: ``keep_open = 1`` (a cached dataset's one lease): the run crosses into a later span only
    of the shard being read, never into another shard's."""
    write_dataset(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    spans = [(0, 0, 20), (0, 50, 70), (1, 0, 20), (2, 0, 20), (2, 60, 80)]
    stats = ReadStats()
    opener = ShardOpener(dataset, keep_open=1, stats=stats, options=ReadOptions(read_ahead=True))
    opener.keep_open = 1
    try:
        first = first_ids(dataset)
        assert ids(opener, spans) == [first[s] + i for s, a, b in spans for i in range(a, b)]
        assert stats.span_starts_ahead == 2  # (0, 50) and (2, 60): same shard as the span before
    finally:
        opener.close()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, SHARDS - 1), st.integers(0, PER_SHARD), st.integers(0, PER_SHARD)),
                max_size=12),
       st.integers(1, 2))
def test_spans_read_as_one_run_give_the_same_samples(tmp_path_factory, raw_spans, keep_open) -> None:
    folder = tmp_path_factory.mktemp("spans")
    write_dataset(str(folder))
    dataset = open_dataset(str(folder))
    spans = [(shard, min(a, b), max(a, b)) for shard, a, b in raw_spans]
    first = first_ids(dataset)
    want = [first[shard] + i for shard, start, end in spans for i in range(start, end)]
    opener = ShardOpener(dataset, keep_open=keep_open, options=ReadOptions(read_ahead=True))
    try:
        assert ids(opener, spans) == want
    finally:
        opener.close()


def test_a_spread_consumer_reads_the_same_with_the_run_across_spans(tmp_path) -> None:
    write_dataset(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    plan = build_plan(dataset.manifest.shard_sizes, PlanParams(batch_size=8, shuffle=True, spread=12, world_size=2))
    for consumer in range(2):
        got, want = [], []
        stats = ReadStats()
        for out, options, s in ((got, ReadOptions(read_ahead=True), stats), (want, ReadOptions(), ReadStats())):
            for part in iter_consumer(dataset, plan, consumer, 0, None, s, options):
                samples = as_samples(part.samples, False)
                out.extend((int(i), int(x["id"])) for i, x in zip(part.indices, samples, strict=True))
        assert got == want and stats.span_starts_ahead > 0


def test_a_shard_that_fails_to_open_ahead_fails_where_its_span_is_reached(tmp_path) -> None:
    """RP6: opening the next span's shard early must not lose the samples before it: its error is
    raised where the consumer reaches that span, as span-by-span reads raise it."""
    write_dataset(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    (tmp_path / dataset.manifest.shards[1].name).unlink()
    first = first_ids(dataset)
    opener = ShardOpener(dataset, options=ReadOptions(read_ahead=True))
    seen: list[int] = []
    try:
        with pytest.raises(OSError):
            for chunk in span_chunks(opener, [(0, 0, 60), (1, 0, 10)]):
                seen.extend(int(s["id"]) for s in as_samples(chunk, False))
        assert seen == [first[0] + i for i in range(60)]
    finally:
        opener.close()


def test_a_block_kept_from_the_run_before_is_not_fetched_again(tmp_path, monkeypatch) -> None:
    """P21 (2) with (3), RP5: runs that follow one another (a mixture's windows, each reading a span
    per source) cut their shards inside blocks; the block a run stops inside is kept by its
    reader, so the next run neither hands it to the helper nor reads it again: every block is
    read from storage once, with read-ahead as without."""
    write_dataset(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    cuts = [0, 7, 33, 61, 95, PER_SHARD]
    runs = [[(0, a, b), (1, a, b)] for a, b in zip(cuts, cuts[1:], strict=False)]
    reads: list[tuple[str, int]] = []
    stored = ShardBlocks.read_stored_block

    def counted(self, block_index):
        reads.append((self.where, block_index))
        return stored(self, block_index)

    monkeypatch.setattr(ShardBlocks, "read_stored_block", counted)
    first = first_ids(dataset)
    for options in (ReadOptions(), ReadOptions(read_ahead=True)):
        reads.clear()
        stats = ReadStats()
        opener = ShardOpener(dataset, stats=stats, options=options)
        try:
            got = [ids(opener, spans) for spans in runs]
        finally:
            opener.close()
        assert got == [[first[s] + i for s, a, b in spans for i in range(a, b)] for spans in runs]
        assert len(reads) == len(set(reads)) == stats.blocks
    assert stats.span_starts_ahead > 0  # the helper did take part


def in_memory(folder) -> StoredDataset:
    """The dataset at ``folder`` copied into a ``MemoryStore``: a store read by range requests
    (no local path), as a remote dataset without a cache dir is."""
    store = MemoryStore()
    copy_into(store, folder)
    return StoredDataset(store, open_dataset(str(folder)).manifest)


class TwoSources:
    """Shards ``0 … n-1`` from ``local``, ``n …`` from ``remote`` (a mixture's global shard
    space, as read/mixture/stream.py lays it out)."""

    def __init__(self, local: ShardOpener, remote: ShardOpener, num_local: int) -> None:
        self.local, self.remote, self.num_local = local, remote, num_local
        self.options, self.stats, self.keep_open, self.open_limit = local.options, local.stats, 2, 4

    def source_of(self, shard_index: int) -> int:
        return int(shard_index >= self.num_local)

    def reader(self, shard_index: int):
        if shard_index < self.num_local:
            return self.local.reader(shard_index)
        return self.remote.reader(shard_index - self.num_local)


def test_a_remote_run_fetches_later_spans_blocks_by_concurrent_ranges(tmp_path) -> None:
    """K33 and RP5 across spans: a remote shard read without a cache dir has its next spans' blocks
    requested while the consumer reads the current one (before, each one-block span was one
    request when the consumer reached it), and the samples are those of the local read."""
    write_dataset(str(tmp_path))
    local, remote = open_dataset(str(tmp_path)), in_memory(tmp_path)
    spans = [(s, a, a + 5) for s in range(SHARDS) for a in (0, 40, 80)]  # each inside one block
    first = first_ids(local)
    stats = ReadStats()
    opener = ShardOpener(remote, stats=stats)
    try:
        assert ids(opener, spans) == [first[s] + i for s, a, b in spans for i in range(a, b)]
        assert opener.reader(0).fetch_mode == "ranges"
    finally:
        opener.close()
    assert stats.ahead_blocks >= len(spans) - 2 and stats.span_starts_ahead >= len(spans) - 2


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2 * SHARDS - 1), st.integers(0, PER_SHARD), st.integers(0, PER_SHARD)),
                max_size=10),
       st.booleans())
def test_one_run_over_a_local_and_a_remote_source_gives_their_samples(tmp_path_factory, raw_spans,
                                                                      read_ahead) -> None:
    """RP4: a mixture of a local and a remote source is read as one run, each block its own shard's
    way (helper or inline for the local shards, ranges for the remote ones), not judged by the
    first span's shard."""
    folder = tmp_path_factory.mktemp("mixed")
    write_dataset(str(folder))
    local = open_dataset(str(folder))
    num_local = len(local.manifest.shards)
    spans = [(shard if shard < SHARDS else num_local + shard - SHARDS, min(a, b), max(a, b))
             for shard, a, b in raw_spans]
    first = first_ids(local)
    want = [first[s if s < num_local else s - num_local] + i for s, a, b in spans for i in range(a, b)]
    options = ReadOptions(read_ahead=read_ahead)
    readers = TwoSources(ShardOpener(local, options=options), ShardOpener(in_memory(folder), options=options),
                         num_local)
    try:
        assert ids(readers, spans) == want
    finally:
        readers.local.close()
        readers.remote.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("shardkit-range")]


class ManySources:
    """``count`` sources over one dataset, each its own ``ShardOpener`` (an owner of RP1) keeping
    ``keep`` shards, sharing one bound of ``limit`` descriptors: global shard ``g`` is shard
    ``g % SHARDS`` of source ``g // SHARDS`` (read/mixture/stream.py's layout)."""

    def __init__(self, dataset, count: int, keep: int, limit: int, stats: ReadStats) -> None:
        from shardkit.read.open_shards import OpenShards

        shared = OpenShards(limit)
        options = ReadOptions(read_ahead=True)
        self.openers = [ShardOpener(dataset, keep_open=keep, stats=stats, options=options, open_shards=shared)
                        for _ in range(count)]
        self.options, self.stats, self.keep_open, self.open_limit = options, stats, keep, limit
        self.shared = shared

    def source_of(self, shard_index: int) -> int:
        return shard_index // SHARDS

    def reader(self, shard_index: int):
        return self.openers[shard_index // SHARDS].reader(shard_index % SHARDS)

    def close(self) -> None:
        for opener in self.openers:
            opener.close()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 2), st.integers(2, 6), st.data())
def test_a_run_over_many_sources_fetches_ahead_across_them_within_both_bounds(
        tmp_path_factory, keep: int, limit: int, data: st.DataObject) -> None:
    """RP6 with several sources (a mixture's window: a span per source): the run fetches ahead
    across sources up to ``open_limit`` shards in all and ``keep_open`` of any one source, the
    shared LRU of RP1 never closes a shard the run still reads (every sample arrives, in
    order), and the next spans' first blocks come from the helper."""
    spans = data.draw(st.lists(st.tuples(st.integers(0, 5 * SHARDS - 1), st.integers(0, PER_SHARD - 10)),
                               min_size=1, max_size=14))
    _read_many_sources(tmp_path_factory.mktemp("many"), keep, limit, [(g, a, a + 10) for g, a in spans])


def test_a_block_an_earlier_span_kept_is_fetched_ahead_once_another_block_of_its_shard_is_read(
        tmp_path) -> None:
    """P21 and RP6: shard 0 of source 0 keeps the block its first span (54-64) stopped inside; a
    later span of the run starts in that block (63-73), after a span of the same shard read
    from another block (0-10). The reader keeps that other block by then, so the later span's
    first block is fetched ahead like any other (it was judged kept when listed, and read by
    the consumer: found by the property above)."""
    _read_many_sources(tmp_path, 1, 2, [(0, 54, 64), (5, 0, 10), (0, 0, 10), (4, 0, 10), (0, 63, 73)])


def _read_many_sources(folder, keep: int, limit: int, spans: list[tuple[int, int, int]]) -> None:
    write_dataset(str(folder))
    dataset = open_dataset(str(folder))
    first = first_ids(dataset)
    want = [first[g % SHARDS] + i for g, a, b in spans for i in range(a, b)]
    stats = ReadStats()
    readers = ManySources(dataset, 5, keep, limit, stats)
    try:
        assert ids(readers, spans) == want
        assert readers.shared.descriptors <= limit
        crossed = sum(1 for i in range(1, len(spans)) if spans[i][0] // SHARDS != spans[i - 1][0] // SHARDS)
        if crossed == len(spans) - 1:  # each span from another source than the one before
            # before RP6 counted shards of all sources against keep_open: none with keep = 1
            assert stats.span_starts_ahead == len(spans) - 1
    finally:
        readers.close()
