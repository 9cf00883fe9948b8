"""One Ray write task's shards: encoded samples in, ``shards/part-{task}-{n}.sks`` out.

The same block and shard boundaries as ``ShardWriter`` (one ``BlockCutter``, cuts.py, I10),
but no manifest: the driver assembles one from every task's ``PartResult``
(specs/ray-packing.md, Y1–Y3). When a dataset is being replaced the parts go to the
staging folder the driver chose (``output.Output``, shard-format.md W5), never over the old
shards. Names depend only on the task index and the shard's position in
the task, so a retried task rewrites the same names with the same bytes.

Not thread-safe; one instance per task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardkit.format import BlockCompressor, CompressOptions, SchemaBuilder, ShardInfo
from shardkit.format.length_index import block_lengths
from shardkit.format.shard_builder import SealedBlock, build_shard, seal_block
from shardkit.storage import Store
from shardkit.write.cuts import ArrangedBlock, BlockCutter, CutWriter
from shardkit.write.lengths import LengthRecorder

PARTS_FOLDER = "shards"
PART_FORMAT = "{folder}/part-{task_index:05d}-{part_index:04d}.sks"
#: The final names, for ``output.Output`` (it needs only the folder and the suffix).
OUTPUT_NAME_FORMAT = f"{PARTS_FOLDER}/part-{{index}}.sks"


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
    lengths: dict[str, bytes] = field(default_factory=dict)  # the part's length index files (M12)


class PartWriter(CutWriter):
    """Append encoded samples; ``finish()`` flushes and returns the task's ``PartResult``."""

    def __init__(self, store: Store, task_index: int, options: PartOptions, folder: str = PARTS_FOLDER) -> None:
        self.store = store
        self.folder = folder  # shards/, or the staging folder when replacing a dataset (W5)
        self.options = options
        self.schema = SchemaBuilder()
        self.result = PartResult(task_index=task_index)
        self._compressor = BlockCompressor(options.compress)
        self._cutter = BlockCutter(options.block_size, options.shard_size, options.layout)  # I12 at its maximum
        self._blocks: list[SealedBlock] = []
        self._lengths = LengthRecorder()

    def append(self, data: bytes, sample: dict[str, Any] | None) -> None:
        """Append one encoded sample; ``sample`` (None: the driver knows the schema) feeds the schema."""
        self._take(self._cutter.make_room(len(data), self.result.num_samples))  # I12
        if sample is not None:
            self.schema.observe(sample)
        self.result.num_samples += 1
        self.result.raw_bytes += len(data)
        self._take(self._cutter.add(data))

    def _seal(self, block: ArrangedBlock) -> None:
        self._lengths.add(block_lengths(*block), len(block[1]) - 1)
        self._blocks.append(seal_block(*block, self._compressor))

    def finish(self) -> PartResult:
        block = self._cutter.flush()
        if block is not None:
            self._seal(block)
        self._close_shard()
        self.result.schema = self.schema.fields
        self.result.lengths = self._lengths.finish()
        return self.result

    def _close_shard(self) -> None:
        if not self._blocks:
            return
        name = PART_FORMAT.format(folder=self.folder, task_index=self.result.task_index,
                                  part_index=len(self.result.shards))
        data, info = build_shard(name, self._blocks)
        self.store.write_atomic(name, data)
        self.result.shards.append(info.to_dict())
        self._blocks = []
        self._cutter.shard_closed()


def shard_infos(result: PartResult, where: str) -> list[ShardInfo]:
    return [ShardInfo.from_dict(raw, where) for raw in result.shards]
