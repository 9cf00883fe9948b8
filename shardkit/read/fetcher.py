"""The block fetcher: one consumer's blocks, in order, over a run of spans (specs/read-path.md,
"Read-ahead").

Every read of samples goes through here — a span of one shard (``ShardReader.sample_chunks``),
the spans of a window (read/stream.py ``read_window``), a window's spans over a mixture's
sources (read/mixture/stream.py) — as one *run*: a list of blocks, expanded span by span as the
consumer or the fetching ahead needs them. How a block is fetched was chosen once, when its
shard was opened (``ShardReader.fetch_mode``):

- ``"helper"`` — a local or cached file with ``ReadOptions.read_ahead``: later blocks are read,
  checked (I5) and decompressed on the process's helper thread (read/read_ahead.py), up to
  ``AHEAD_BYTES`` of raw bytes in flight; raw blocks only with views (``worth_ahead``);
- ``"ranges"`` — a store read without a cache dir (K33): adjacent blocks of one shard joined into
  one range request up to ``coalesce_bytes``, ``max_requests`` in flight, ``max_bytes`` stored
  bytes fetched and not yet consumed (read/range_ahead.py); the block being read, if not
  fetched yet, is requested alone, so a first batch waits for one block, not a range;
- ``"inline"`` — read by the consumer when it reaches the block.

One run may mix them (a mixture of local and remote sources): each block is fetched its own
shard's way. The block a run stopped inside is kept by its reader for the next run (P21) and is
never fetched again. Fetching ahead reaches only into spans whose shards may be open with the
one being read — at most ``opener.keep_open`` distinct shards of one source, and
``opener.open_limit`` in all, from the span being read to the farthest one fetched — and
readers are opened in span order, so the opener's LRU (RP1) never
closes a shard the run still reads. A shard that fails to open ahead is not opened ahead again;
its error is raised where the consumer reaches its span, after every sample before it.

Not thread-safe: one consumer per run; the run's threads are done when ``chunks()`` ends or is
closed (a ``break`` included).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardkit.read.range_ahead import RangeOptions, RangesAhead
from shardkit.read.read_ahead import BlocksAhead

if TYPE_CHECKING:  # both import this module: the names are for the type checker only
    from shardkit.read.open_shards import ShardReaders
    from shardkit.read.shard_reader import SampleChunk, ShardReader

SpanRange = tuple[int, int, int]  # shard index, first sample, end sample (shard-local)

HELPER, RANGES, INLINE = "helper", "ranges", "inline"  # ShardReader.fetch_mode


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
    mode: str  # how it is fetched: HELPER, RANGES, INLINE (INLINE too for a block not worth it)


def span_chunks(readers: ShardReaders, spans: Iterable[SpanRange]) -> Iterator[SampleChunk]:
    """The samples of ``spans`` in order, one chunk per block (the block's samples of that span)."""
    spans = [(shard, start, end) for shard, start, end in spans if end > start]
    if spans:
        yield from BlockRun(readers, spans).chunks()


class BlockRun:
    def __init__(self, readers: ShardReaders, spans: list[SpanRange]) -> None:
        self.readers, self.spans = readers, spans
        self.blocks: list[_Block] = []  # the blocks of spans ``0 … expanded - 1``, in order
        self.expanded = 0
        self.span_shards: deque[tuple[int, int, int]] = deque()  # (span, shard, source) from the current one
        self.open_now: dict[int, int] = {}  # their distinct shards: spans listed of each
        self.source_now: dict[int, int] = {}  # their distinct shards of each source
        self.helper: BlocksAhead | None = None
        self.ranges: RangesAhead | None = None
        self.open_failed = False  # a shard opened ahead failed: open nothing more ahead
        self.alone = -1  # the last position requested when the consumer reached it, not ahead
        self.listed: set[int] = set()  # the readers (ids) with blocks listed in this run

    def chunks(self) -> Iterator[SampleChunk]:
        candidate = 0  # the next block to consider fetching ahead
        position = 0
        try:
            while position < len(self.blocks) or self._expand(current_span=None):
                block = self.blocks[position]
                candidate = max(candidate, position + 1)
                if block.mode == RANGES and not self._ranges(block).holds(position):
                    # not fetched ahead: requested now, alone at the run's start (a first batch
                    # waits for one block), else with the adjacent blocks that follow
                    group = [position] if position == 0 else self._ranged_group(position)
                    self._submit_ranges(group)
                    self.alone, candidate = position, max(candidate, group[-1] + 1)
                candidate = self._send_ahead(candidate, block.span, expand=position > 0 or block.mode != RANGES)
                yield block.reader.block_samples(block.block_index, self._fetched(position, block), block.part)
                position += 1
        finally:  # the threads must be done with the readers before they close
            if self.helper is not None:
                self.helper.close()
            if self.ranges is not None:
                self.ranges.close()

    def _fetched(self, position: int, block: _Block) -> bytes | memoryview | None:
        """The block's decompressed bytes if fetched ahead (waiting for them), else None: the
        reader reads it (or has kept it)."""
        ahead: BlocksAhead | RangesAhead | None = self.helper if block.mode == HELPER else self.ranges
        if ahead is None or not ahead.holds(position):
            return None
        stats = self.readers.stats
        waited = time.perf_counter()
        got = ahead.take()
        stats.io_seconds += time.perf_counter() - waited
        if position != self.alone:
            stats.ahead_blocks += 1
            stats.span_starts_ahead += block.first_of_span
        if block.mode == RANGES:
            return block.reader.decode_stored_block(block.block_index, got, stop=block.stop)
        return got

    # ---- fetching ahead ---------------------------------------------------------------------
    def _send_ahead(self, candidate: int, current_span: int, expand: bool) -> int:
        """Hand blocks ``candidate…`` to their fetcher while it has room, expanding further spans
        (if ``expand``) as far as the open-shard rule allows; the next candidate. A run over a
        store expands only once its first block is out: opening a shard ahead is a request on
        the consumer's thread, which the first batch would wait for."""
        while candidate < len(self.blocks) or (expand and self._expand_ahead(current_span)):
            block = self.blocks[candidate]
            if block.mode == HELPER:
                helper = self._helper()
                raw_size = block.reader.index.table["raw_size"][block.block_index]
                if not helper.has_room(raw_size):
                    break
                helper.submit(candidate, raw_size)
            elif block.mode == RANGES:
                group = self._ranged_group(candidate)
                if not self._ranges(block).has_room(self._stored_size(group)):
                    break
                self._submit_ranges(group)
                candidate = group[-1]
            candidate += 1
        return candidate

    def _helper(self) -> BlocksAhead:
        if self.helper is None:
            self.helper = BlocksAhead(self._raw_ahead)
        return self.helper

    def _ranges(self, block: _Block) -> RangesAhead:
        if self.ranges is None:
            options = block.reader.ranges
            self.ranges = RangesAhead(options if options is not None else RangeOptions())
        return self.ranges

    def _raw_ahead(self, position: int) -> bytes | memoryview:
        """On the helper thread: block ``position`` of the run, checked and decompressed."""
        block = self.blocks[position]
        return block.reader.raw_block_ahead(block.block_index, stop=block.stop)

    def _ranged_group(self, candidate: int) -> list[int]:
        """Positions ``candidate…`` whose blocks are adjacent blocks of one shard, joined into
        one request up to the run's ``coalesce_bytes`` (a larger first block goes alone)."""
        first = self.blocks[candidate]
        limit = self._ranges(first).options.coalesce_bytes
        group, total = [candidate], self._stored_size([candidate])
        for position in range(candidate + 1, len(self.blocks)):
            block, before = self.blocks[position], self.blocks[position - 1]
            size = self._stored_size([position])
            if (block.mode != RANGES or block.reader is not first.reader
                    or block.block_index != before.block_index + 1 or total + size > limit):
                break
            group.append(position)
            total += size
        return group

    def _submit_ranges(self, positions: list[int]) -> None:
        first, last = self.blocks[positions[0]], self.blocks[positions[-1]]
        reader, stop = first.reader, last.block_index + 1
        sizes = [self._stored_size([p]) for p in positions]
        self._ranges(first).submit(positions, sizes, lambda: reader.fetch_stored_blocks(first.block_index, stop))

    def _stored_size(self, positions: list[int]) -> int:
        blocks = self.blocks
        return sum(blocks[p].reader.index.table["stored_size"][blocks[p].block_index] for p in positions)

    # ---- the run's blocks, span by span -----------------------------------------------------
    def _expand_ahead(self, current_span: int) -> bool:
        """``_expand`` for fetching ahead: a shard that fails to open is not opened ahead; its
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
        source = self.readers.source_of(shard)
        if current_span is not None:
            while self.span_shards and self.span_shards[0][0] < current_span:
                self._forget(self.span_shards.popleft())
            if shard not in self.open_now and not self._may_open(source):
                return False
        else:
            self.span_shards.clear()
            self.open_now.clear()
            self.source_now.clear()
        reader = self.readers.reader(shard)
        index = reader.index
        stop = min(end, reader.num_samples)
        first, first_block = index.starts, index.block_of(start)
        # a block the reader kept from the run before (P21) is still kept when the consumer
        # reaches it only if no earlier block of this run is read from the same reader
        kept_then = id(reader) not in self.listed
        self.listed.add(id(reader))
        for block_index in range(first_block, index.block_of(stop - 1) + 1):
            base = first[block_index]
            part = (max(start - base, 0), min(stop, first[block_index + 1]) - base)
            self.blocks.append(_Block(self.expanded, shard, reader, block_index, stop, part,
                                      block_index == first_block,
                                      _mode(reader, block_index, kept_then and block_index == first_block)))
        self._remember(shard, source)
        self.expanded += 1
        return True

    def _may_open(self, source: int) -> bool:
        """Whether another shard of ``source`` may be open with the distinct shards from the
        current span on (RP6): at most ``keep_open`` of one source, ``open_limit`` in all."""
        readers = self.readers
        return len(self.open_now) < readers.open_limit and self.source_now.get(source, 0) < readers.keep_open

    def _remember(self, shard: int, source: int) -> None:
        self.span_shards.append((self.expanded, shard, source))
        if shard not in self.open_now:
            self.source_now[source] = self.source_now.get(source, 0) + 1
        self.open_now[shard] = self.open_now.get(shard, 0) + 1

    def _forget(self, entry: tuple[int, int, int]) -> None:
        _, shard, source = entry
        if not _decrement(self.open_now, shard):
            _decrement(self.source_now, source)


def _decrement(counts: dict[int, int], key: int) -> int:
    """One fewer of ``key`` (gone at zero); how many are left."""
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
    return left


def _mode(reader: Any, block_index: int, may_keep: bool) -> str:
    """How this block is fetched: its shard's way, unless it is not worth fetching ahead (a raw
    block without views, for the helper) or its reader kept it from the run before (P21) and
    still will when the consumer reaches it (``may_keep``: the run's first block of the reader)."""
    mode: str = reader.fetch_mode
    if mode == INLINE or (may_keep and reader.keeps(block_index)):
        return INLINE
    if mode == HELPER and not reader.worth_ahead(block_index):
        return INLINE
    return mode
