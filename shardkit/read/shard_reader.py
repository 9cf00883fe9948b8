"""``ShardReader``: one shard, random access by sample index, reading only the blocks it needs.

Opening costs one suffix read (footer + index; its length is in the manifest, so exactly one
request when the manifest entry is given: read/shard_blocks.py). Blocks are fetched,
checked (I5) and decompressed by ``ShardBlocks`` (read/shard_blocks.py); this module turns them
into samples. Which blocks are fetched ahead, and how (a helper thread, concurrent range
requests from a store, K33), is the block fetcher's (read/fetcher.py): the reader only says
how its shard's blocks are fetched (``fetch_mode``, chosen once).

Thread-safety: not thread-safe; use one reader per thread (the read-ahead helper thread,
``ReadOptions.read_ahead``, decompresses with its own zstd context).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardkit.errors import CorruptShardError, FormatError
from shardkit.format import ShardInfo, decode_block, decode_sample
from shardkit.format.column_block import LAYOUT_COLUMNS
from shardkit.format.column_parse import parse_columns
from shardkit.format.shard_layout import HEADER_SIZE, ShardIndex, check_header
from shardkit.read.column_pieces import ColumnPiece, as_samples
from shardkit.read.fetcher import HELPER, INLINE, RANGES, span_chunks
from shardkit.read.options import ReadOptions
from shardkit.read.shard_blocks import (
    ByteSource,
    ShardBlocks,
    check_against_manifest,
    read_shard_index,
    resolve_max_block_bytes,
)
from shardkit.read.stats import ReadStats

SampleChunk = list[dict[str, Any]] | ColumnPiece  # a block's sample dicts, or (with views) a selection of its columns


class ShardReader(ShardBlocks):
    def __init__(
        self,
        source: ByteSource,
        info: ShardInfo | None = None,
        shard_label: str | None = None,
        stats: ReadStats | None = None,
        options: ReadOptions = ReadOptions(),
        max_block_bytes: int | None = None,
        index: ShardIndex | None = None,
    ) -> None:
        """``options``: read-ahead and views (``ReadOptions``). ``max_block_bytes``: blocks
        declaring more raw bytes are refused before they are read (I12; default
        ``resolve_max_block_bytes()``). ``index``: the shard's index, already checked (a cached
        shard's, K45); blocks are then checked against it, and the file's own is not read."""
        self.source = source
        self.info = info
        self.label = shard_label or (info.name if info else source.where)
        self.where = f"shard {self.label} ({source.where})"
        self.max_block_bytes = resolve_max_block_bytes(max_block_bytes)
        self.stats = stats if stats is not None else ReadStats()
        self.index = index if index is not None else self._read_index()
        self.options = options
        self.read_ahead = options.read_ahead and getattr(source, "thread_safe", False)
        self.views = options.views
        # A remote source (range requests): blocks are fetched ahead, concurrently (K33).
        self.ranges = options.ranges if getattr(source, "ranged", False) else None
        # How the block fetcher gets this shard's blocks, chosen once (read/fetcher.py).
        self.fetch_mode = RANGES if self.ranges is not None else HELPER if self.read_ahead else INLINE
        # The block a run stopped inside (its parsed columns, or its whole raw bytes): the next
        # window's run of this shard starts there, and is not read, checked and parsed again.
        self._kept: tuple[int, Any] | None = None

    # ---- structure --------------------------------------------------------------------------
    def _read_index(self) -> ShardIndex:
        return read_shard_index(self.source, self.info, self.where)

    def check_against_manifest(self, index: ShardIndex, info: ShardInfo) -> None:
        """M8 (``shard_blocks.check_against_manifest``)."""
        check_against_manifest(index, info, self.where)

    def check_header(self) -> None:
        check_header(bytes(self.source.read_range(0, HEADER_SIZE)), self.where)

    @property
    def num_samples(self) -> int:
        return self.index.num_samples

    @property
    def num_blocks(self) -> int:
        return self.index.num_blocks

    def __len__(self) -> int:
        return self.index.num_samples

    # ---- samples ----------------------------------------------------------------------------
    def block_samples(self, block_index: int, raw: bytes | memoryview | None = None,
                      part: tuple[int, int] | None = None) -> SampleChunk:
        """Samples ``lo:hi`` (``part``, block-local; default: all) of one block, in order (``raw``:
        its decompressed bytes, if at hand); a ``ColumnPiece`` for a column block if the reader
        was made with ``views``. Only the samples asked for are unpacked (P21: a spread span that
        starts or ends inside a block pays for its own samples, not the block's)."""
        table = self.index.table
        expected, layout = table["num_samples"][block_index], table["layout"][block_index]
        lo, hi = part if part is not None else (0, expected)
        started = time.perf_counter()
        kept = self._kept[1] if self._kept is not None and self._kept[0] == block_index else None
        fresh = kept is None  # read now (or by the helper), not kept from the run before
        if fresh and raw is None:
            stored = self.read_stored_block(block_index)
            read = time.perf_counter()
            self.stats.io_seconds += read - started
            started = read
            raw = self.decode_stored_block(block_index, stored, stop=int(self.index.first_sample[block_index]) + hi)
        try:
            if fresh and layout == LAYOUT_COLUMNS:
                kept = parse_columns(raw, expected)  # type: ignore[arg-type]
            samples = self._decode_part(raw if kept is None else kept, block_index, expected, layout, lo, hi)
        except (FormatError, ValueError) as exc:
            raise CorruptShardError(
                f"{self.where}: {self._block_label(block_index)} does not decode: {exc}"
            ) from None
        stats = self.stats
        stats.decode_seconds += time.perf_counter() - started
        if fresh:  # a kept block was counted once, when it was read
            stats.raw_bytes += len(raw)  # type: ignore[arg-type]
            stats.blocks += 1
            if kept is None and len(raw) == table["raw_size"][block_index]:  # type: ignore[arg-type]
                kept = raw  # a row block decompressed whole (not a prefix, P21)
        self._kept = (block_index, kept) if hi < expected and kept is not None else None
        return samples

    def _decode_part(self, raw: Any, block_index: int, expected: int, layout: int,
                     lo: int, hi: int) -> SampleChunk:
        """Samples ``lo:hi`` of a decompressed block: a row block's are unpacked from their own
        bytes (the index's sample offsets), a column block's selected from its parsed columns
        (``raw``: the list ``parse_columns`` made)."""
        if layout == LAYOUT_COLUMNS:
            piece = ColumnPiece(raw, np.arange(lo, hi, dtype=np.int64))
            return piece if self.views else piece.samples()
        offsets = self.index.offsets_of(block_index)
        if lo == 0 and hi == expected:
            return decode_block(raw, expected, layout, offsets, self.views)
        base = int(offsets[lo])
        piece_bytes = memoryview(raw)[base : int(offsets[hi])]
        return decode_block(piece_bytes, hi - lo, layout, offsets[lo : hi + 1] - base, self.views)

    def __getitem__(self, sample_index: int) -> dict[str, Any]:
        if not 0 <= sample_index < self.num_samples:
            raise IndexError(f"{self.where}: sample {sample_index} out of range [0, {self.num_samples})")
        block_index = self.index.block_of(sample_index)
        local = sample_index - int(self.index.first_sample[block_index])
        record = self.index.blocks[block_index]
        if record["layout"]:  # columns: parse them, build this one sample
            try:
                columns = parse_columns(self.read_raw_block(block_index), int(record["num_samples"]))
            except (FormatError, ValueError) as exc:
                label = self._block_label(block_index)
                raise CorruptShardError(f"{self.where}: {label} does not decode: {exc}") from None
            return ColumnPiece(columns, np.array([local], dtype=np.int64)).samples()[0]
        raw = self.read_raw_block(block_index)
        offsets = self.index.offsets_of(block_index)
        try:
            return decode_sample(raw[int(offsets[local]) : int(offsets[local + 1])])
        except (FormatError, ValueError) as exc:
            raise CorruptShardError(f"{self.where}: sample {sample_index} does not decode: {exc}") from None

    def sample_chunks(self, start: int = 0, stop: int | None = None) -> Iterator[SampleChunk]:
        """Samples ``[start, stop)`` in order as one chunk per block, decoding only those blocks
        (one run of the block fetcher, read/fetcher.py)."""
        stop = self.num_samples if stop is None else min(stop, self.num_samples)
        return span_chunks(_OwnSpans(self), [(0, max(start, 0), stop)])

    def keeps(self, block_index: int) -> bool:
        """Whether the block a run stopped inside, kept for the next run (P21), is ``block_index``:
        a run that starts there reuses it, so it is not worth handing to the read-ahead helper."""
        return self._kept is not None and self._kept[0] == block_index

    def worth_ahead(self, block_index: int) -> bool:
        """Compressed blocks always; raw ones only with ``views``. Measured on raw image blocks
        whose samples msgpack copies out: 13.7k against 17.2k samples/s with the check on the
        helper thread; with views (one copy, into the batch) it is the other way round."""
        return bool(self.index.table["codec"][block_index]) or self.views

    def samples(self, start: int = 0, stop: int | None = None) -> Iterator[dict[str, Any]]:
        """SampleChunk ``[start, stop)`` in order, decoding only the blocks that hold them."""
        for chunk in self.sample_chunks(start, stop):
            yield from as_samples(chunk, self.views)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.samples()

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _OwnSpans:
    """One reader as the fetcher's ``Readers`` for runs over its own samples."""

    keep_open = open_limit = 1

    def __init__(self, reader: ShardReader) -> None:
        self._reader = reader
        self.options, self.stats = reader.options, reader.stats

    def reader(self, shard_index: int) -> ShardReader:
        return self._reader

    def source_of(self, shard_index: int) -> int:
        return 0
