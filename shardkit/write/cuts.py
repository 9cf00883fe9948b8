"""Where blocks and shards end (I10, specs/shard-format.md), written once for every writer
(``ShardWriter`` and the Ray engine's ``PartWriter``).

A block is sealed as soon as its samples' encoded bytes reach ``block_size``; it is arranged
here (rows or columns, ``arrange_block``) because a shard is closed after the block that brings
its *raw* bytes — what the arranged blocks hold — to ``shard_size``. A block is never asked to
be larger than a shard (I14): a ``block_size`` above ``shard_size`` is lowered to it, so
``--shard-size 8KiB`` gives shards of about 8 KiB, not one default 1 MiB block each. Not
thread-safe.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from shardkit.format.limits import MAX_BLOCK_BYTES
from shardkit.format.shard_builder import arrange_block, seal_first

ArrangedBlock = tuple[bytes, np.ndarray, int]  # raw bytes, sample offsets, layout


class BlockCutter:
    def __init__(self, block_size: int, shard_size: int, layout: str = "auto",
                 max_block_bytes: int = MAX_BLOCK_BYTES) -> None:
        self.block_size, self.shard_size, self.layout = min(block_size, shard_size), shard_size, layout
        self.max_block_bytes = max_block_bytes
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._shard_raw = 0

    def add(self, data: bytes) -> ArrangedBlock | None:
        """Append one encoded sample; the arranged block when this sample filled it."""
        self._pending.append(data)
        self._pending_bytes += len(data)
        return self.flush() if self._pending_bytes >= self.block_size else None

    def make_room(self, sample_bytes: int, sample_index: int, limit: int | None = None) -> ArrangedBlock | None:
        """I12: the pending block, sealed now if a sample of ``sample_bytes`` would take it past
        ``limit`` (default ``max_block_bytes``; a sample larger than a whole block is an
        ``EncodeError``)."""
        limit = self.max_block_bytes if limit is None else limit
        if seal_first(self._pending_bytes, sample_bytes, sample_index, limit):
            return self.flush()
        return None

    def flush(self) -> ArrangedBlock | None:
        """The pending samples as an arranged block (None if there are none)."""
        if not self._pending:
            return None
        block = arrange_block(self._pending, self.layout)
        self._shard_raw += len(block[0])
        self._pending, self._pending_bytes = [], 0
        return block

    @property
    def shard_full(self) -> bool:
        """Whether the blocks handed out since the last ``shard_closed`` fill a shard."""
        return self._shard_raw >= self.shard_size

    def shard_closed(self) -> None:
        self._shard_raw = 0


class CutWriter(ABC):
    """What a writer does with its ``BlockCutter``'s blocks (``ShardWriter``, ``PartWriter``):
    seal each one, then close the shard once its blocks fill it."""

    _cutter: BlockCutter

    @abstractmethod
    def _seal(self, block: ArrangedBlock) -> None:
        """Seal one arranged block into the open shard."""

    @abstractmethod
    def _close_shard(self) -> None:
        """Write the open shard out and tell the cutter (``shard_closed``)."""

    def _take(self, block: ArrangedBlock | None) -> None:
        if block is not None:
            self._seal(block)
            if self._cutter.shard_full:
                self._close_shard()
