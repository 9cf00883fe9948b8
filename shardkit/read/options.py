"""``ReadOptions``: how a shard reader hands out samples (the flags that travel together from the
loader through ``iter_consumer`` and ``ShardOpener`` to every ``ShardReader``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shardkit.read.range_ahead import RangeOptions


@dataclass(frozen=True)
class ReadOptions:
    """``read_ahead``: while one block's samples are unpacked, a helper thread checks and
    decompresses the next few (read_ahead.py; xxhash and zstd release the GIL). Used only with
    thread-safe sources (local and cached files); worth it when the process has a spare core.

    ``views``: for a consumer that copies every sample out at once (the loader's default
    collation): large bin values and arrays come as views of the verified block
    (``decode_block_samples(views=True)``), column blocks as ``ColumnPiece``s
    (read/column_pieces.py) instead of sample dicts, and the read-ahead thread also checks raw
    (stored uncompressed) blocks.

    ``ranges``: how a shard read by range requests (no cache dir) fetches its next blocks:
    concurrent, coalesced, bounded in bytes (read/range_ahead.py)."""

    read_ahead: bool = False
    views: bool = False
    ranges: RangeOptions = field(default_factory=RangeOptions)
