"""``shardkit pack``: raw input → dataset, in one process or ``--workers N`` processes.

One pipeline for every input, engine option and map (TB10): read items (cheap) → cut them into
fixed chunks (``CHUNK_ITEMS``, independent of the worker count) → in one worker per chunk:
decode each item into a sample, map it (``PackOptions.map``: zero or more samples per record)
and encode → in the main process, in chunk order: the pack-time shuffle (PS1) or source order
→ one ``ShardWriter``, which cuts blocks and shards. So block and shard boundaries — and every
byte — are the same for any ``--workers`` (W3), and a mapped pack is the pack of the mapped
samples (same order, same shuffle, same bytes).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from shardkit.errors import EncodeError, SourceError
from shardkit.format import SampleEncoder, SchemaBuilder
from shardkit.write import imports, inputs, sources
from shardkit.write.map_fn import MapRef, apply_map, check_importable, resolve
from shardkit.write.parquet_source import iter_parquet
from shardkit.write.shuffle import ShuffleOptions, write_chunks
from shardkit.write.workers import ordered_map, refuse_rerun_in_worker
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
    split: str | None = None  # Hugging Face datasets with several splits
    # A function over each input record, or "module:function" (write/map_fn.py, TB10); None: none.
    map: MapRef | None = None


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
    num_unmapped: int = 0  # input records the map function made no sample of (TB10)

    def to_dict(self) -> dict[str, Any]:
        rate = self.num_samples / self.seconds if self.seconds else 0.0
        return {**self.__dict__, "samples_per_s": round(rate, 1)}


@dataclass
class _Chunk:
    encoded: list[bytes]
    schema: dict[str, Any]
    skipped: list[dict[str, str]]
    raw_bytes: int
    num_unmapped: int = 0  # records the map function made no sample of


@dataclass(frozen=True)
class _Recipe:
    """What a worker does with each item of a chunk (picklable: it crosses to the workers)."""

    fmt: str
    skip_bad: bool
    map: MapRef | None


def _convert(fmt: str) -> Callable[[sources.Item], Any]:
    if fmt == "jsonl":
        return sources.parse_jsonl_item
    if fmt == "text":
        return sources.parse_text_item
    if fmt == "records":
        return _record
    return sources.to_sample


def _record(item: sources.Item) -> Any:
    return item.row


def encode_chunk(args: tuple[_Recipe, list[sources.Item]]) -> _Chunk:
    """Decode, map and encode one chunk of items (runs in a worker process)."""
    recipe, items = args
    convert, encoder, schema = _convert(recipe.fmt), SampleEncoder(), SchemaBuilder()
    fn = None if recipe.map is None else resolve(recipe.map)
    check_keys = fn is not None or recipe.fmt not in _STR_KEYED
    chunk = _Chunk([], {}, [], 0)
    for item in items:
        try:
            record = convert(item)
            samples = [record] if fn is None else apply_map(fn, record, item.origin)
            encoded = _encode(encoder, samples, check_keys, item.origin)
        except (SourceError, EncodeError) as exc:
            if not recipe.skip_bad:
                raise
            chunk.skipped.append(sources.skip_entry(item.origin, exc))
            continue
        chunk.num_unmapped += not samples
        for sample in samples:
            schema.observe(sample)
        chunk.encoded.extend(encoded)
    chunk.schema, chunk.raw_bytes = schema.fields, sum(len(e) for e in chunk.encoded)
    return chunk


def _encode(encoder: SampleEncoder, samples: list[dict[str, Any]], check_keys: bool, origin: str) -> list[bytes]:
    try:
        return [encoder.encode(sample, check_keys=check_keys) for sample in samples]
    except EncodeError as exc:
        raise SourceError(f"{origin}: {exc}") from None


def input_format(src: str, options: PackOptions) -> str:
    """The format of ``src``: ``options.fmt``, or detected from the names (specs/pack-inputs.md);
    with a map function a ``.txt``/``.text`` file is text (TB10)."""
    if options.fmt != "auto":
        return options.fmt
    if options.map is not None and not os.path.isdir(src) and src.lower().endswith(sources.TEXT_SUFFIXES):
        return "text"
    return imports.detect(src) or inputs.detect_format(src)


def _items(src: str | Iterable[Any], options: PackOptions) -> tuple[str, Iterator[sources.Item], dict[str, Any]]:
    if not isinstance(src, str):
        if options.map is None:
            raise SourceError("records from an iterable need a map function (sk.pack(fn, records, out))")
        return "records", _record_items(src), {}
    fmt = input_format(src, options)
    extra: dict[str, Any] = {}
    if fmt in imports.FORMATS:
        items = imports.iter_items(fmt, src, options.split)
    elif fmt == "files":
        items, classes = sources.iter_files(src, options.label_from_dir, auto=options.fmt == "auto")
        if classes:
            extra["classes"] = classes
    elif fmt == "jsonl":
        items = sources.iter_jsonl(src)
    elif fmt == "text":
        items = sources.iter_text(src)
    elif fmt == "parquet":
        items = iter_parquet(src)
    elif fmt == "wds":
        items = sources.iter_wds(src)
    else:
        raise SourceError(f"unknown format {fmt!r}; choose one of {(*sources.FORMATS, *imports.FORMATS)}")
    return fmt, items, extra


def _record_items(records: Iterable[Any]) -> Iterator[sources.Item]:
    for index, record in enumerate(records):
        yield sources.Item(origin=f"input record {index}", key=str(index), row=record)


def _tasks(recipe: _Recipe, items: Iterator[sources.Item]) -> Iterator[tuple[_Recipe, list[sources.Item]]]:
    while chunk := list(itertools.islice(items, CHUNK_ITEMS)):
        yield recipe, chunk


def pack(src: str | Iterable[Any], out: str, options: PackOptions, progress: Any = None) -> PackSummary:
    """Pack ``src`` (a path; with ``options.map``, also an iterable of records) into a dataset
    at ``out``; ``progress`` gets ``update(n_samples, n_bytes)``."""
    refuse_rerun_in_worker()  # before anything touches ``out``
    started = time.perf_counter()
    if options.map is not None:
        resolve(options.map)  # fail early, in this process, on a bad reference
        if options.workers > 1:
            check_importable(options.map)
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
        recipe = _Recipe(fmt, options.skip_bad, options.map)
        chunks = _observed(ordered_map(encode_chunk, _tasks(recipe, items), options.workers), summary, progress)
        summary.shuffle_temp_bytes = write_chunks(writer, chunks, options.shuffle)
        if writer.num_samples == 0:
            raise SourceError(_nothing_packed(src, options, summary))
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


def _nothing_packed(src: str | Iterable[Any], options: PackOptions, summary: PackSummary) -> str:
    where = src if isinstance(src, str) else "the input records"
    skipped = f", {len(summary.skipped)} skipped as bad" if summary.skipped else ""
    if options.map is not None:
        unmapped = summary.num_unmapped
        return f"{where}: the map function produced no samples ({unmapped} record(s) mapped to none{skipped})"
    return f"{where}: no samples to pack" + (" (all skipped)" if summary.skipped else "")


def _observed(chunks: Iterator[_Chunk], summary: PackSummary, progress: Any) -> Iterator[_Chunk]:
    for chunk in chunks:
        summary.skipped.extend(chunk.skipped)
        summary.num_unmapped += chunk.num_unmapped
        if progress is not None:
            progress.update(len(chunk.encoded), chunk.raw_bytes)
        yield chunk
