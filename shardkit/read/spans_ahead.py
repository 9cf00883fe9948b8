"""One read-ahead run across a consumer's consecutive spans (P21).

``ShardReader.sample_chunks`` reads one span with its own read-ahead run, so the first block of
every span is read, checked and decompressed on the consumer's thread (the run starts empty).
A spread plan (P18) cuts a consumer's window into ~``spread`` times as many short spans, so
that first block is most of what is read. ``span_chunks`` reads a window's spans as one run:
while the consumer unpacks span ``k`` the helper thread (read/read_ahead.py) already fetches
the blocks of spans ``k + 1, …``, within the same ``AHEAD_BYTES``.

Leases (P19, specs/cache.md): the run reaches only into spans whose shards can be open at the
same time as the one being read, i.e. at most ``opener.keep_open`` distinct shards from
the span being read to the farthest one fetched: a local dataset (2 open readers) crosses into
the next shard, a cached one (1 lease) only into further spans of the open shard. Readers are
opened in span order, so the opener's LRU never closes a shard the run still reads (every shard
it evicts was last used by a span before the one being read).

Without read-ahead (``ReadOptions.read_ahead`` off, or a source that is not thread-safe), and
for a remote dataset read without a cache dir (its runs fetch blocks by concurrent range
requests, K33, judged by the first span's shard), each span is read by ``sample_chunks`` as
before. Not thread-safe: one consumer per run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from shardkit.read.open_shards import ShardReaders
from shardkit.read.read_ahead import BlocksAhead
from shardkit.read.shard_reader import SampleChunk, ShardReader

SpanRange = tuple[int, int, int]  # shard index, first sample, end sample (shard-local)


@dataclass
class _Block:
    """One block of the run: the span it belongs to, its reader, its samples ``part``."""

    span: int
    shard: int
    reader: ShardReader
    block_index: int
    stop: int  # the span's end sample: a zstd row block is decompressed only that far
    part: tuple[int, int]
    first_of_span: bool
    ahead: bool  # worth handing to the helper (ShardReader.worth_ahead)


def span_chunks(opener: ShardReaders, spans: Iterable[SpanRange]) -> Iterator[SampleChunk]:
    """The chunks of ``spans`` in order (one per block), as ``sample_chunks`` of each would give."""
    spans = [(shard, start, end) for shard, start, end in spans if end > start]
    if not opener.options.read_ahead or len(spans) < 2 or opener.reader(spans[0][0]).ranges is not None:
        # a remote shard without a cache dir reads each span by concurrent range requests (K33)
        for shard, start, end in spans:
            yield from opener.reader(shard).sample_chunks(start, end)
        return
    yield from _SpansRun(opener, spans).chunks()


class _SpansRun:
    def __init__(self, opener: ShardReaders, spans: list[SpanRange]) -> None:
        self.opener, self.spans = opener, spans
        self.blocks: list[_Block] = []  # the blocks of spans ``0 … expanded - 1``, in order
        self.expanded = 0
        self.span_shards: deque[tuple[int, int]] = deque()  # (span, shard) expanded from ``current``
        self.ahead: BlocksAhead | None = None
        self.open_failed = False  # a shard opened ahead failed: open nothing more ahead

    def chunks(self) -> Iterator[SampleChunk]:
        stats = self.opener.stats
        candidate = 0  # the next block to consider handing to the helper
        position = 0
        try:
            while position < len(self.blocks) or self._expand(current_span=None):
                block = self.blocks[position]
                raw = None
                ahead = self.ahead
                if ahead is not None:
                    candidate = self._send_ahead(ahead, max(candidate, position + 1), block.span)
                    if ahead.holds(position):
                        waited = time.perf_counter()
                        raw = ahead.take()
                        stats.io_seconds += time.perf_counter() - waited
                        stats.ahead_blocks += 1
                        stats.span_starts_ahead += block.first_of_span
                yield block.reader.block_samples(block.block_index, raw, block.part)
                position += 1
        finally:
            if self.ahead is not None:  # the helper must be done with the readers before they close
                self.ahead.close()

    def _send_ahead(self, ahead: BlocksAhead, candidate: int, current_span: int) -> int:
        """Hand blocks ``candidate…`` to the helper while it has room, expanding further spans
        as far as the open-shard rule allows; the next candidate."""
        while candidate < len(self.blocks) or self._expand_ahead(current_span):
            block = self.blocks[candidate]
            raw_size = int(block.reader.index.blocks[block.block_index]["raw_size"])
            if not ahead.has_room(raw_size):
                break
            if block.ahead:
                ahead.submit(candidate, raw_size)
            candidate += 1
        return candidate

    def _expand_ahead(self, current_span: int) -> bool:
        """``_expand`` for the helper's sake: a shard that fails to open is not opened ahead; its
        error is raised where the consumer reaches its span, after the samples before it."""
        if self.open_failed:
            return False
        try:
            return self._expand(current_span)
        except Exception:
            self.open_failed = True
            return False

    def _expand(self, current_span: int | None) -> bool:
        """List the blocks of the next span, if its shard may be open with those from
        ``current_span`` on (None: the consumer needs it now); whether any were listed."""
        if self.expanded >= len(self.spans):
            return False
        shard, start, end = self.spans[self.expanded]
        if current_span is not None:
            while self.span_shards and self.span_shards[0][0] < current_span:
                self.span_shards.popleft()
            shards = {s for _, s in self.span_shards} | {shard}
            if len(shards) > self.opener.keep_open:
                return False
        else:
            self.span_shards.clear()
        reader = self.opener.reader(shard)
        if self.ahead is None and reader.read_ahead:
            self.ahead = BlocksAhead(self._fetch)
        index = reader.index
        stop = min(end, reader.num_samples)
        first, first_block = index.first_sample, index.block_of(start)
        for block_index in range(first_block, index.block_of(stop - 1) + 1):
            base = int(first[block_index])
            part = (max(start - base, 0), min(stop, int(first[block_index + 1])) - base)
            self.blocks.append(_Block(self.expanded, shard, reader, block_index, stop, part,
                                      block_index == first_block,
                                      reader.read_ahead and reader.worth_ahead(block_index)
                                      and not reader.keeps(block_index)))
        self.span_shards.append((self.expanded, shard))
        self.expanded += 1
        return True

    def _fetch(self, position: int) -> bytes | memoryview:
        """On the helper thread: block ``position`` of the run, checked and decompressed."""
        block = self.blocks[position]
        return block.reader.raw_block_ahead(block.block_index, stop=block.stop)
