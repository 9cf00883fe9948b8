"""One Ray write task's shards: encoded samples in, ``shards/part-{task}-{n}.sks`` out.

The same block and shard boundaries as ``ShardWriter`` (a block is sealed when its raw bytes
reach ``block_size``; a shard is closed after the block that brings its raw bytes to
``shard_size``), but no manifest: the driver assembles one from every task's ``PartResult``
(specs/ray-packing.md, R1–R3). Names depend only on the task index and the shard's position in
the task, so a retried task rewrites the same names with the same bytes.

Not thread-safe; one instance per task.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from shardkit.format import BlockCompressor, CompressOptions, SchemaBuilder, ShardInfo
from shardkit.format.shard_builder import SealedBlock, arrange_block, build_shard, seal_block, seal_first
from shardkit.storage import Store

PART_FORMAT = "shards/part-{task_index:05d}-{part_index:04d}.sks"
#: Names this engine writes (and may delete as orphans): parts and staging files in shards/.
PART_PATTERN = re.compile(r"^shards/(part-\d{5,}-\d{4,}\.sks|\.tmp-[^/]*)$")


@dataclass(frozen=True)
class PartOptions:
    shard_size: int = 64 << 20
    block_size: int = 1 << 20
    compress: CompressOptions = CompressOptions()
    layout: str = "auto"  # see WriterOptions.layout


@dataclass
class PartResult:
    """What one task reports to the driver (plain data: it crosses the object store)."""

    task_index: int
    shards: list[dict[str, Any]] = field(default_factory=list)  # ShardInfo.to_dict()
    schema: dict[str, Any] = field(default_factory=dict)
    num_samples: int = 0
    raw_bytes: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)


class PartWriter:
    """Append encoded samples; ``finish()`` flushes and returns the task's ``PartResult``."""

    def __init__(self, store: Store, task_index: int, options: PartOptions) -> None:
        self.store = store
        self.options = options
        self.schema = SchemaBuilder()
        self.result = PartResult(task_index=task_index)
        self._compressor = BlockCompressor(options.compress)
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._blocks: list[SealedBlock] = []
        self._shard_raw = 0

    def append(self, data: bytes, sample: dict[str, Any]) -> None:
        if seal_first(self._pending_bytes, len(data), self.result.num_samples):  # I12
            self._seal_block()
            if self._shard_raw >= self.options.shard_size:
                self._close_shard()
        self.schema.observe(sample)
        self._pending.append(data)
        self._pending_bytes += len(data)
        self.result.num_samples += 1
        self.result.raw_bytes += len(data)
        if self._pending_bytes >= self.options.block_size:
            self._seal_block()
            if self._shard_raw >= self.options.shard_size:
                self._close_shard()

    def finish(self) -> PartResult:
        self._seal_block()
        self._close_shard()
        self.result.schema = self.schema.fields
        return self.result

    def _seal_block(self) -> None:
        if not self._pending:
            return
        raw, offsets, layout = arrange_block(self._pending, self.options.layout)
        self._blocks.append(seal_block(raw, offsets, layout, self._compressor))
        self._shard_raw += len(raw)
        self._pending, self._pending_bytes = [], 0

    def _close_shard(self) -> None:
        if not self._blocks:
            return
        name = PART_FORMAT.format(task_index=self.result.task_index, part_index=len(self.result.shards))
        data, info = build_shard(name, self._blocks)
        self.store.write_atomic(name, data)
        self.result.shards.append(info.to_dict())
        self._blocks, self._shard_raw = [], 0


def shard_infos(result: PartResult, where: str) -> list[ShardInfo]:
    return [ShardInfo.from_dict(raw, where) for raw in result.shards]
