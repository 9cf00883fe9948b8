"""``shardkit pack``: raw folder → dataset, in one process or ``--workers N`` processes.

Items are cut into fixed chunks (``CHUNK_ITEMS``, independent of the worker count); each chunk
is decoded and encoded by one worker; the main process appends the encoded chunks *in order* to
one ``ShardWriter``. So block and shard boundaries — and every byte — are the same for any
``--workers`` (W3).
"""

from __future__ import annotations

import itertools
import multiprocessing
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from shardkit.errors import EncodeError, SourceError
from shardkit.format import SampleEncoder, SchemaBuilder
from shardkit.write import sources
from shardkit.write.parquet_source import iter_parquet
from shardkit.write.shuffle import ShuffleOptions, write_chunks
from shardkit.write.writer import ShardWriter

CHUNK_ITEMS = 256
# Sources whose map keys are str by construction (no need to walk samples for other keys).
_STR_KEYED = frozenset({"jsonl", "parquet"})


@dataclass(frozen=True)
class PackOptions:
    fmt: str = "auto"
    workers: int = 1
    shard_size: str | int = "64MiB"
    block_size: str | int = "1MiB"
    level: int = 3
    compression: str = "auto"
    layout: str = "auto"
    metadata: dict[str, Any] = field(default_factory=dict)
    overwrite: bool = False
    skip_bad: bool = False
    label_from_dir: bool = False
    storage_options: dict[str, Any] = field(default_factory=dict)
    # Samples in a seeded random order (specs/pack-shuffle.md); None keeps the source order.
    shuffle: ShuffleOptions | None = field(default_factory=ShuffleOptions)


@dataclass
class PackSummary:
    output: str
    num_samples: int = 0
    num_shards: int = 0
    raw_bytes: int = 0
    num_bytes: int = 0
    seconds: float = 0.0
    fingerprint: str = ""
    skipped: list[dict[str, str]] = field(default_factory=list)
    shuffle_temp_bytes: int = 0  # bytes the pack-time shuffle wrote to temp files (PS4)

    def to_dict(self) -> dict[str, Any]:
        rate = self.num_samples / self.seconds if self.seconds else 0.0
        return {**self.__dict__, "samples_per_s": round(rate, 1)}


@dataclass
class _Chunk:
    encoded: list[bytes]
    schema: dict[str, Any]
    skipped: list[dict[str, str]]
    raw_bytes: int


def _convert(fmt: str) -> Callable[[sources.Item], dict[str, Any]]:
    return sources.parse_jsonl_item if fmt == "jsonl" else sources.to_sample


def encode_chunk(args: tuple[str, bool, list[sources.Item]]) -> _Chunk:
    """Decode and encode one chunk of items (runs in a worker process)."""
    fmt, skip_bad, items = args
    convert, encoder, schema = _convert(fmt), SampleEncoder(), SchemaBuilder()
    encoded, skipped = [], []
    for item in items:
        try:
            sample = convert(item)
            data = encoder.encode(sample, check_keys=fmt not in _STR_KEYED)
        except (SourceError, EncodeError) as exc:
            if not skip_bad:
                raise SourceError(f"{item.origin}: {exc}") if isinstance(exc, EncodeError) else exc from None
            skipped.append({"origin": item.origin, "error": str(exc)})
            continue
        schema.observe(sample)
        encoded.append(data)
    return _Chunk(encoded, schema.fields, skipped, sum(len(e) for e in encoded))


def _items(src: str, options: PackOptions) -> tuple[str, Iterator[sources.Item], dict[str, Any]]:
    fmt = sources.detect_format(src) if options.fmt == "auto" else options.fmt
    extra: dict[str, Any] = {}
    if fmt == "files":
        items, classes = sources.iter_files(src, options.label_from_dir)
        if classes:
            extra["classes"] = classes
    elif fmt == "jsonl":
        items = sources.iter_jsonl(src)
    elif fmt == "parquet":
        items = iter_parquet(src)
    elif fmt == "wds":
        items = sources.iter_wds(src)
    else:
        raise SourceError(f"unknown format {fmt!r}; choose one of {sources.FORMATS}")
    return fmt, items, extra


def _chunks(fmt: str, skip_bad: bool, items: Iterator[sources.Item]) -> Iterator[tuple[str, bool, list[sources.Item]]]:
    while chunk := list(itertools.islice(items, CHUNK_ITEMS)):
        yield fmt, skip_bad, chunk


def pack(src: str, out: str, options: PackOptions, progress: Any = None) -> PackSummary:
    """Pack ``src`` into a dataset at ``out``; ``progress`` gets ``update(n_samples, n_bytes)``."""
    started = time.perf_counter()
    fmt, items, extra = _items(src, options)
    summary = PackSummary(output=out)
    with ShardWriter(
        out,
        shard_size=options.shard_size,
        block_size=options.block_size,
        level=options.level,
        compression=options.compression,
        layout=options.layout,
        metadata={**options.metadata, **extra},
        storage_options=options.storage_options,
        overwrite=options.overwrite,
    ) as writer:
        chunks = _run_chunks(_chunks(fmt, options.skip_bad, items), options.workers)
        summary.shuffle_temp_bytes = write_chunks(writer, _observed(chunks, summary, progress), options.shuffle)
        if writer.num_samples == 0:
            raise SourceError(f"{src}: no samples to pack" + (" (all skipped)" if summary.skipped else ""))
        if summary.skipped:
            writer.metadata["skipped"] = summary.skipped
        manifest = writer.close()
    summary.num_samples = manifest.num_samples
    summary.num_shards = len(manifest.shards)
    summary.raw_bytes = manifest.raw_bytes
    summary.num_bytes = manifest.num_bytes
    summary.fingerprint = manifest.fingerprint
    summary.seconds = time.perf_counter() - started
    return summary


def _observed(chunks: Iterator[_Chunk], summary: PackSummary, progress: Any) -> Iterator[_Chunk]:
    for chunk in chunks:
        summary.skipped.extend(chunk.skipped)
        if progress is not None:
            progress.update(len(chunk.encoded), chunk.raw_bytes)
        yield chunk


def _run_chunks(chunks: Iterator[tuple[str, bool, list[sources.Item]]], workers: int) -> Iterator[_Chunk]:
    if workers <= 1:
        yield from map(encode_chunk, chunks)
        return
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        yield from pool.imap(encode_chunk, chunks, chunksize=1)
