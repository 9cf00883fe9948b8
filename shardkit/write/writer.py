"""``ShardWriter``: samples in, shards and a manifest out (specs/shard-format.md, manifest.md).

Blocks are sealed when their raw bytes reach ``block_size`` and compressed on a small thread
pool (zstd releases the GIL), so encoding the next block overlaps compressing the last. Sealed
blocks are appended to their shard's file in order as soon as they are compressed (a temp file
locally, published by rename when the shard is closed: ``Store.open_atomic``), so a shard is
never held whole in memory. A shard is closed when its raw bytes reach ``shard_size``; every
boundary depends only on the input, so the same samples give byte-identical shards and the same
fingerprint (W1). Shards are written first, the manifest last and atomically; an exception
inside ``with`` leaves no manifest and no shard (W2). Replacing a dataset (``overwrite``) keeps
the old one whole until the new manifest is published (``output.Output``, W5).

Not thread-safe: call ``write`` from one thread.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import numpy as np

from shardkit import __version__
from shardkit.format import (
    MANIFEST_NAME,
    BlockCompressor,
    CompressOptions,
    Manifest,
    SampleEncoder,
    SchemaBuilder,
    ShardInfo,
    decode_manifest,
)
from shardkit.format.length_index import LengthsInfo, block_lengths
from shardkit.format.limits import MAX_BLOCK_BYTES
from shardkit.format.shard_builder import LAYOUT_CHOICES, SealedBlock, ShardAssembler, seal_block
from shardkit.storage import Store, open_store
from shardkit.storage.store import AtomicWrite
from shardkit.units import parse_size
from shardkit.write.cuts import ArrangedBlock, BlockCutter, CutWriter
from shardkit.write.lengths import LengthRecorder, write_length_files
from shardkit.write.output import Output

log = logging.getLogger(__name__)
SealedLengths = tuple[SealedBlock, dict[str, np.ndarray]]  # a block, and its fields' lengths (M12)


@dataclass(frozen=True)
class WriterOptions:
    shard_size: int = 64 << 20
    block_size: int = 1 << 20
    compress: CompressOptions = CompressOptions()
    name_format: str = "shards/shard-{index:06d}.sks"
    overwrite: bool = False
    threads: int = 2
    layout: str = "auto"  # "auto": uniform small samples as column blocks; "rows": never
    max_block_bytes: int = MAX_BLOCK_BYTES  # I12; only ever lowered (tests, tools)

    def __post_init__(self) -> None:
        if self.layout not in LAYOUT_CHOICES:
            raise ValueError(f"layout must be one of {LAYOUT_CHOICES}, got {self.layout!r}")
        if not 0 < self.max_block_bytes <= MAX_BLOCK_BYTES:
            raise ValueError(f"max_block_bytes must be in [1, {MAX_BLOCK_BYTES}], got {self.max_block_bytes}")
        if self.block_size > self.max_block_bytes:
            raise ValueError(
                f"block_size {self.block_size} is above the maximum block size {self.max_block_bytes} (I12)"
            )


class PublishOnExit(ABC):
    """``with`` support for a writer: on a clean exit it publishes (``close``) unless that is
    done already; when the block raised it removes what it wrote (``abort``)."""

    @property
    @abstractmethod
    def closed(self) -> bool: ...

    @abstractmethod
    def close(self) -> Manifest: ...

    @abstractmethod
    def abort(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif not self.closed:
            self.close()


class ShardWriter(CutWriter, PublishOnExit):
    """Context manager writing a dataset folder at ``out`` (a path or an fsspec URL)."""

    def __init__(
        self,
        out: str,
        *,
        shard_size: int | str = "64MiB",
        block_size: int | str = "1MiB",
        level: int = 3,
        compression: str = "auto",
        metadata: dict[str, Any] | None = None,
        storage_options: dict[str, Any] | None = None,
        overwrite: bool = False,
        layout: str = "auto",
        length_index: Sequence[str] | None = None,
    ) -> None:
        """``length_index``: the fields whose per-sample length is recorded (M12; default: every
        integer array field, ``()``: none)."""
        self.options = WriterOptions(
            shard_size=max(1, parse_size(shard_size)),
            block_size=max(1, parse_size(block_size)),
            compress=CompressOptions(compression=compression, level=level),
            overwrite=overwrite,
            layout=layout,
        )
        self.store: Store = open_store(out, storage_options)
        self.metadata = dict(metadata or {})
        # The manifest's "order" (M9): as written, unless a shuffling front (pack, ShuffledWriter) says otherwise.
        self.order: dict[str, Any] | None = {"shuffled": False}
        self.schema = SchemaBuilder()
        self.shards: list[ShardInfo] = []
        self.lengths = LengthRecorder(length_index)
        self._lengths_written: list[str] = []
        self._encoder = SampleEncoder()
        self._cutter = BlockCutter(self.options.block_size, self.options.shard_size, self.options.layout)
        self._shard_blocks: deque[Future[SealedLengths]] = deque()  # sealed, not yet in the file
        self._shard: tuple[ShardAssembler, AtomicWrite] | None = None  # the shard being written
        self._commits: list[tuple[Future[None], AtomicWrite]] = []  # at most one in flight
        self._num_samples = 0
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self.options.threads, thread_name_prefix="shardkit-compress")
        self._closed = False
        self._output = Output(self.store, self.options.name_format, self.options.overwrite)

    # ---- public -----------------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return self._num_samples

    def write(self, sample: dict[str, Any]) -> None:
        """Append one sample. Raises ``EncodeError`` naming the field and sample index."""
        data = self._encoder.encode(sample, self._num_samples)
        self._append(data)  # first: it refuses a sample larger than a block (I12)
        self.schema.observe(sample)

    def write_encoded(self, encoded: list[bytes], schema: dict[str, Any] | None) -> None:
        """Append samples already encoded elsewhere (parallel packing) with their schema
        (``None``: already recorded with :meth:`observe_schema`, as a shuffled pack does)."""
        if schema is not None:
            self.schema.update(schema, len(encoded))
        for data in encoded:
            self._append(data)

    def observe_schema(self, schema: dict[str, Any], num_samples: int) -> None:
        """Merge the schema of ``num_samples`` samples to be written later (in another order)."""
        self.schema.update(schema, num_samples)

    @property
    def closed(self) -> bool:
        """Whether ``close`` or ``abort`` ran."""
        return self._closed

    def close(self) -> Manifest:
        """Flush the last block and shard, then publish the manifest. Call once: a second call
        raises ``ValueError``."""
        if self._closed:
            raise ValueError("ShardWriter is already closed")
        self._seal(self._cutter.flush())
        self._close_shard()
        self._wait_for_commits()
        self._pool.shutdown()
        lengths = self._write_lengths()

        def build(shards: tuple[ShardInfo, ...], lengths: tuple[LengthsInfo, ...]) -> bytes:
            return Manifest(shards=shards, schema=self.schema.to_dict(), metadata=self.metadata,
                            created_by=f"shardkit {__version__}", order=self.order, lengths=lengths).to_json()

        data = self._output.publish(tuple(self.shards), build, lengths)
        self._closed = True
        return decode_manifest(data, self.store.url_of(MANIFEST_NAME))

    def abort(self) -> None:
        """Stop without a manifest and remove the shards written so far (best effort)."""
        if self._closed:
            return
        self._closed = True
        for future in self._shard_blocks:
            future.cancel()
        for commit, _ in self._commits:
            commit.cancel()
        self._pool.shutdown(wait=True)
        files = [file for _, file in self._commits] + ([self._shard[1]] if self._shard else [])
        for file in files:
            file.discard()  # a temp file not yet renamed into place
        try:
            self._output.after_failure([*(info.name for info in self.shards), *self._lengths_written])
        except OSError as exc:
            log.warning("could not clean up %s after an aborted write: %s", self.store.url, exc)

    # ---- internals --------------------------------------------------------------------------
    def _append(self, data: bytes) -> None:
        # I12: no block past the maximum (the options' limit, which tools and tests may lower)
        self._take(self._cutter.make_room(len(data), self._num_samples, self.options.max_block_bytes))
        self._num_samples += 1
        self._take(self._cutter.add(data))

    def _seal(self, block: ArrangedBlock | None) -> None:
        """Compress an arranged block on the pool (arranged by the cutter, not on the pool: the
        shard is closed on the raw size of what it holds, I10)."""
        if block is None:
            return
        self._shard_blocks.append(self._pool.submit(self._compress, *block))
        self._write_blocks(keep=2 * self.options.threads)

    def _compress(self, raw: bytes, offsets: np.ndarray, layout: int) -> SealedLengths:
        """The sealed block, and the lengths of its integer array fields (M12)."""
        compressor = getattr(self._local, "compressor", None)
        if compressor is None:
            compressor = self._local.compressor = BlockCompressor(self.options.compress)
        found = block_lengths(raw, offsets, layout) if self.lengths.required != () else {}
        return seal_block(raw, offsets, layout, compressor), found

    def _write_lengths(self) -> tuple[LengthsInfo, ...]:
        """Write the length index files (M10) next to the shards; their manifest entries."""
        return write_length_files(self.store, self._output, self.lengths.finish(), self._lengths_written)

    def _write_blocks(self, keep: int = 0) -> None:
        """Append compressed blocks to the shard's file in order: every one already done, and
        more (waiting) until at most ``keep`` are left in memory."""
        blocks = self._shard_blocks
        while blocks and (blocks[0].done() or len(blocks) > keep):
            block, found = blocks.popleft().result()
            self.lengths.add(found, block.num_samples)
            if self._shard is None:
                name = self._output.shard_name(len(self.shards))
                assembler = ShardAssembler(name)
                self._shard = (assembler, self.store.open_atomic(name))
                self._shard[1].write(assembler.header())
            assembler, file = self._shard
            file.write(assembler.add(block))

    def _close_shard(self) -> None:
        self._write_blocks()
        if self._shard is None:
            return
        assembler, file = self._shard
        tail, info = assembler.finish()
        file.write(tail)
        self._wait_for_commits()  # at most one shard being synced at a time
        self._commits = [(self._pool.submit(file.commit), file)]
        self.shards.append(info)
        self._shard = None
        self._cutter.shard_closed()

    def _wait_for_commits(self) -> None:
        for commit, _ in self._commits:
            commit.result()
