"""``ShardWriter``: samples in, shards and a manifest out (specs/shard-format.md, manifest.md).

Blocks are sealed when their raw bytes reach ``block_size`` and compressed on a small thread
pool (zstd releases the GIL), so encoding the next block overlaps compressing the last. A shard
is closed when its raw bytes reach ``shard_size``; every boundary depends only on the input, so
the same samples give byte-identical shards and the same fingerprint (W1). Shards are written
first, the manifest last and atomically; an exception inside ``with`` leaves no manifest (W2).

Not thread-safe: call ``write`` from one thread.
"""

from __future__ import annotations

import logging
import threading
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
from shardkit.format.shard_builder import LAYOUT_CHOICES, SealedBlock, arrange_block, build_shard, seal_block
from shardkit.storage import Store, open_store
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

    def __post_init__(self) -> None:
        if self.layout not in LAYOUT_CHOICES:
            raise ValueError(f"layout must be one of {LAYOUT_CHOICES}, got {self.layout!r}")


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
        self._shard_blocks: list[Future[SealedBlock]] = []
        self._shard_raw = 0
        self._num_samples = 0
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self.options.threads, thread_name_prefix="shardkit-compress")
        self._writes: list[Future[None]] = []
        self._closed = False
        self._old_names = self._prepare_output()

    # ---- public -----------------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return self._num_samples

    def write(self, sample: dict[str, Any]) -> None:
        """Append one sample. Raises ``EncodeError`` naming the field and sample index."""
        data = self._encoder.encode(sample, self._num_samples)
        self.schema.observe(sample)
        self._append(data)

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
        for write in self._writes:
            write.result()
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
        for future in self._shard_blocks + self._writes:
            future.cancel()
        self._pool.shutdown(wait=True)
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
            return []
        where = self.store.url_of(MANIFEST_NAME)
        if not self.options.overwrite:
            raise FileExistsError(f"{where} exists; pass overwrite=True (CLI: --overwrite) to replace it")
        try:
            old = [s.name for s in decode_manifest(self.store.read(MANIFEST_NAME), where).shards]
        except ManifestError:
            old = []
        self.store.delete(MANIFEST_NAME)
        return old

    def _delete_stale(self) -> None:
        keep = {s.name for s in self.shards}
        for name in self._old_names:
            if name not in keep:
                self.store.delete(name)

    def _append(self, data: bytes) -> None:
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

    def _compress(self, raw: bytes, offsets: np.ndarray, layout: int) -> SealedBlock:
        compressor = getattr(self._local, "compressor", None)
        if compressor is None:
            compressor = self._local.compressor = BlockCompressor(self.options.compress)
        return seal_block(raw, offsets, layout, compressor)

    def _close_shard(self) -> None:
        if not self._shard_blocks:
            return
        name = self.options.name_format.format(index=len(self.shards))
        blocks, self._shard_blocks, self._shard_raw = self._shard_blocks, [], 0
        for write in self._writes:  # at most one shard write in flight: bounded memory
            write.result()
        data, info = build_shard(name, [b.result() for b in blocks])
        self.shards.append(info)
        self._writes = [self._pool.submit(self.store.write_atomic, name, data)]
