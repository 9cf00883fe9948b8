"""``ShardWriter``: samples in, shards and a manifest out (specs/shard-format.md, manifest.md).

Blocks are sealed when their raw bytes reach ``block_size`` and compressed on a small thread
pool (zstd releases the GIL), so encoding the next block overlaps compressing the last. Sealed
blocks are appended to their shard's file in order as soon as they are compressed (a temp file
locally, published by rename when the shard is closed: ``Store.open_atomic``), so a shard is
never held whole in memory. A shard is closed when its raw bytes reach ``shard_size``; every
boundary depends only on the input, so the same samples give byte-identical shards and the same
fingerprint (W1). Shards are written first, the manifest last and atomically; an exception
inside ``with`` leaves no manifest and no shard (W2).

Not thread-safe: call ``write`` from one thread.
"""

from __future__ import annotations

import logging
import posixpath
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from shardkit import __version__
from shardkit.errors import ManifestError
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
from shardkit.format.limits import MAX_BLOCK_BYTES
from shardkit.format.shard_builder import (
    LAYOUT_CHOICES,
    SealedBlock,
    ShardAssembler,
    arrange_block,
    seal_block,
    seal_first,
)
from shardkit.storage import Store, open_store
from shardkit.storage.atomic import AtomicWrite
from shardkit.units import parse_size

log = logging.getLogger(__name__)


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


class ShardWriter:
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
    ) -> None:
        self.options = WriterOptions(
            shard_size=max(1, parse_size(shard_size)),
            block_size=max(1, parse_size(block_size)),
            compress=CompressOptions(compression=compression, level=level),
            overwrite=overwrite,
            layout=layout,
        )
        self.store: Store = open_store(out, storage_options)
        self.metadata = dict(metadata or {})
        self.schema = SchemaBuilder()
        self.shards: list[ShardInfo] = []
        self._encoder = SampleEncoder()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._shard_blocks: deque[Future[SealedBlock]] = deque()  # sealed, not yet in the file
        self._shard: tuple[ShardAssembler, AtomicWrite] | None = None  # the shard being written
        self._commits: list[tuple[Future[None], AtomicWrite]] = []  # at most one in flight
        self._shard_raw = 0
        self._num_samples = 0
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self.options.threads, thread_name_prefix="shardkit-compress")
        self._closed = False
        self._old_names = self._prepare_output()

    # ---- public -----------------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return self._num_samples

    def write(self, sample: dict[str, Any]) -> None:
        """Append one sample. Raises ``EncodeError`` naming the field and sample index."""
        data = self._encoder.encode(sample, self._num_samples)
        self._append(data)  # first: it refuses a sample larger than a block (I12)
        self.schema.observe(sample)

    def write_encoded(self, encoded: list[bytes], schema: dict[str, Any]) -> None:
        """Append samples already encoded elsewhere (parallel packing) with their schema."""
        self.schema.update(schema, len(encoded))
        for data in encoded:
            self._append(data)

    def close(self) -> Manifest:
        """Flush the last block and shard, then publish the manifest. Idempotent."""
        if self._closed:
            raise ValueError("ShardWriter is already closed")
        self._seal_block()
        self._close_shard()
        self._wait_for_commits()
        self._pool.shutdown()
        manifest = Manifest(
            shards=tuple(self.shards),
            schema=self.schema.to_dict(),
            metadata=self.metadata,
            created_by=f"shardkit {__version__}",
        )
        data = manifest.to_json()
        self.store.write_atomic(MANIFEST_NAME, data)
        self._closed = True
        self._delete_stale()
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
        for info in self.shards:
            try:
                self.store.delete(info.name)
            except OSError:
                log.warning("could not remove %s after an aborted write", self.store.url_of(info.name))

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()

    # ---- internals --------------------------------------------------------------------------
    def _prepare_output(self) -> list[str]:
        """Refuse to clobber a dataset unless ``overwrite``; then unpublish its manifest first."""
        if not self.store.exists(MANIFEST_NAME):
            self._remove_temp_files()
            return []
        where = self.store.url_of(MANIFEST_NAME)
        if not self.options.overwrite:
            raise FileExistsError(f"{where} exists; pass overwrite=True (CLI: --overwrite) to replace it")
        try:
            old = [s.name for s in decode_manifest(self.store.read(MANIFEST_NAME), where).shards]
        except ManifestError:
            old = []
        self.store.delete(MANIFEST_NAME)
        self._remove_temp_files()
        return old

    def _remove_temp_files(self) -> None:
        """Shards a killed writer was streaming (``.tmp-*`` beside the shards, W2); local only:
        object stores publish whole uploads and leave no temp objects."""
        folder = posixpath.dirname(self.options.name_format)
        if not self.store.is_local or not folder:
            return
        for name in self.store.list(folder):
            if posixpath.basename(name).startswith(".tmp-"):
                log.info("removing %s, left by an interrupted writer", self.store.url_of(name))
                self.store.delete(name)

    def _delete_stale(self) -> None:
        keep = {s.name for s in self.shards}
        for name in self._old_names:
            if name not in keep:
                self.store.delete(name)

    def _append(self, data: bytes) -> None:
        if seal_first(self._pending_bytes, len(data), self._num_samples, self.options.max_block_bytes):
            self._seal_block()  # I12: no block grows past the maximum
            if self._shard_raw >= self.options.shard_size:
                self._close_shard()
        self._pending.append(data)
        self._pending_bytes += len(data)
        self._num_samples += 1
        if self._pending_bytes >= self.options.block_size:
            self._seal_block()
            if self._shard_raw >= self.options.shard_size:
                self._close_shard()

    def _seal_block(self) -> None:
        if not self._pending:
            return
        # Arranged here, not on the pool: the shard is closed on the raw size of what it holds (I10).
        raw, offsets, layout = arrange_block(self._pending, self.options.layout)
        self._shard_blocks.append(self._pool.submit(self._compress, raw, offsets, layout))
        self._shard_raw += len(raw)
        self._pending, self._pending_bytes = [], 0
        self._write_blocks(keep=2 * self.options.threads)

    def _compress(self, raw: bytes, offsets: np.ndarray, layout: int) -> SealedBlock:
        compressor = getattr(self._local, "compressor", None)
        if compressor is None:
            compressor = self._local.compressor = BlockCompressor(self.options.compress)
        return seal_block(raw, offsets, layout, compressor)

    def _write_blocks(self, keep: int = 0) -> None:
        """Append compressed blocks to the shard's file in order: every one already done, and
        more (waiting) until at most ``keep`` are left in memory."""
        blocks = self._shard_blocks
        while blocks and (blocks[0].done() or len(blocks) > keep):
            block = blocks.popleft().result()
            if self._shard is None:
                name = self.options.name_format.format(index=len(self.shards))
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
        self._shard, self._shard_raw = None, 0

    def _wait_for_commits(self) -> None:
        for commit, _ in self._commits:
            commit.result()
