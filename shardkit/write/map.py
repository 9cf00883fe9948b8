"""``sk.pack(fn, inputs, out, workers=N)``: a user function over input records, in parallel
worker processes, into one dataset (``shardkit pack IN OUT --map MODULE:FUNCTION``).

The map contract (specs/token-blocks.md TB10):

- ``fn(record)`` returns one sample (a ``dict``), a ``list`` or ``tuple`` of samples, or
  ``None`` to skip the record; anything else is an :class:`EncodeError` naming the record.
- Records are cut into fixed chunks of ``CHUNK_RECORDS`` (independent of ``workers``); a worker
  maps and encodes one chunk; the main process appends chunks in input order. Output order is
  input order, then list order — so shards, manifest and fingerprint are byte-identical for any
  worker count (W3), provided ``fn`` is deterministic.
- ``fn`` is a module-level callable (workers are spawned, so it must be importable by name) or a
  ``"module:function"`` string. ``inputs`` is an iterable of picklable records, or a path
  (``input_records``): a JSONL file (each line's object is one record), a text file (each
  line is ``{"text": line}``, newline removed) or Parquet files (each row a dict, list columns
  as numpy arrays, as ``pack`` reads them).
- An exception in ``fn`` is re-raised as :class:`SourceError` naming the record's index.
"""

from __future__ import annotations

import importlib
import itertools
import json
import multiprocessing
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from shardkit.errors import EncodeError, ShardkitError, SourceError
from shardkit.format import SampleEncoder, SchemaBuilder
from shardkit.write.inputs import detect_format
from shardkit.write.pack import PackOptions, PackSummary
from shardkit.write.parquet_source import iter_parquet
from shardkit.write.writer import ShardWriter

CHUNK_RECORDS = 256
MAP_FORMATS = ("jsonl", "text", "parquet")
MapFn = Callable[[Any], Any]


@dataclass
class _Mapped:
    encoded: list[bytes]
    schema: dict[str, Any]
    num_skipped: int
    raw_bytes: int


def resolve(fn: MapFn | str) -> MapFn:
    """``"module:function"`` (dotted attributes allowed after the colon) → the callable."""
    if callable(fn):
        return fn
    module_name, _, attr = str(fn).partition(":")
    if not module_name or not attr:
        raise SourceError(f"--map {fn!r}: expected MODULE:FUNCTION")
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise SourceError(f"--map {fn!r}: cannot import: {exc}") from None
    if not callable(value):
        raise SourceError(f"--map {fn!r}: {type(value).__name__} is not callable")
    return value


def _samples(result: Any, index: int) -> list[dict[str, Any]]:
    if result is None:
        return []
    samples = list(result) if isinstance(result, list | tuple) else [result]
    for sample in samples:
        if not isinstance(sample, dict):
            raise EncodeError(f"input record {index}: the map function returned {type(sample).__name__}; "
                              "expected a dict, a list of dicts or None")
    return samples


def map_chunk(args: tuple[MapFn | str, int, list[Any]]) -> _Mapped:
    """Map and encode one chunk (runs in a worker process); ``first`` is its first record's index."""
    fn_ref, first, records = args
    fn, encoder, schema = resolve(fn_ref), SampleEncoder(), SchemaBuilder()
    encoded, skipped = [], 0
    for index, record in enumerate(records, first):
        try:
            result = fn(record)
        except ShardkitError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: name the record, keep the message
            raise SourceError(f"input record {index}: the map function raised {type(exc).__name__}: {exc}") from None
        samples = _samples(result, index)
        skipped += not samples
        for sample in samples:
            try:
                encoded.append(encoder.encode(sample))
            except EncodeError as exc:
                raise EncodeError(f"input record {index}: {exc}") from None
            schema.observe(sample)
    return _Mapped(encoded, schema.fields, skipped, sum(len(e) for e in encoded))


def _numbered_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` of the file at ``path``, numbered from 1."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
    with fh:
        yield from enumerate(fh, 1)


def jsonl_records(path: str) -> Iterator[dict[str, Any]]:
    for number, line in _numbered_lines(path):
        if line.strip():
            try:
                yield json.loads(line)
            except (ValueError, UnicodeDecodeError) as exc:
                raise SourceError(f"{path}:{number}: not valid JSON: {exc}") from None


def text_records(path: str) -> Iterator[dict[str, Any]]:
    """``{"text": line}`` for every line of a UTF-8 text file (newline removed)."""
    for number, line in _numbered_lines(path):
        try:
            yield {"text": line.rstrip(b"\r\n").decode("utf-8")}
        except UnicodeDecodeError as exc:
            raise SourceError(f"{path}:{number}: not UTF-8 text: {exc}") from None


def map_format(path: str, fmt: str = "auto") -> str:
    """The input format of ``--map``: ``fmt``, or ``auto`` from the name (``.txt``/``.text``:
    text, else as ``pack`` detects it, which must be JSONL or Parquet)."""
    if fmt == "auto":
        fmt = "text" if path.lower().endswith((".txt", ".text")) else detect_format(path)
    if fmt not in MAP_FORMATS:
        raise SourceError(f"{path}: --map takes {', '.join(MAP_FORMATS)} input, not {fmt}; pass --format")
    return fmt


def input_records(path: str, fmt: str = "auto") -> Iterator[Any]:
    """The records of the input at ``path`` (``map_format``), in order."""
    fmt = map_format(path, fmt)
    if fmt == "text":
        return text_records(path)
    if fmt == "parquet":
        return (item.row for item in iter_parquet(path))
    return jsonl_records(path)


def _chunks(fn: MapFn | str, records: Iterable[Any]) -> Iterator[tuple[MapFn | str, int, list[Any]]]:
    it, first = iter(records), 0
    while chunk := list(itertools.islice(it, CHUNK_RECORDS)):
        yield fn, first, chunk
        first += len(chunk)


def _run(tasks: Iterator[tuple[MapFn | str, int, list[Any]]], workers: int) -> Iterator[_Mapped]:
    if workers <= 1:
        yield from map(map_chunk, tasks)
        return
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap(map_chunk, tasks, chunksize=1)


def pack(fn: MapFn | str, inputs: Iterable[Any] | str, out: str, *, workers: int = 1,
         options: PackOptions | None = None, progress: Any = None) -> PackSummary:
    """Map ``fn`` over ``inputs`` into a dataset at ``out`` (``options``: writer settings; its
    ``fmt`` the format of an input path, ``input_records``)."""
    options = options or PackOptions()
    if workers < 1:
        raise SourceError(f"workers must be >= 1, got {workers}")
    resolve(fn)  # fail early, in this process, on a bad reference
    records = input_records(inputs, options.fmt) if isinstance(inputs, str) else inputs
    started, summary, skipped = time.perf_counter(), PackSummary(output=out), 0
    with ShardWriter(out, shard_size=options.shard_size, block_size=options.block_size, level=options.level,
                     compression=options.compression, layout=options.layout, metadata=dict(options.metadata),
                     storage_options=options.storage_options, overwrite=options.overwrite) as writer:
        for mapped in _run(_chunks(fn, records), workers):
            writer.write_encoded(mapped.encoded, mapped.schema)
            skipped += mapped.num_skipped
            if progress is not None:
                progress.update(len(mapped.encoded), mapped.raw_bytes)
        if writer.num_samples == 0:
            raise SourceError(f"{out}: the map function produced no samples ({skipped} record(s) skipped)")
        manifest = writer.close()
    summary.num_samples, summary.num_shards = manifest.num_samples, len(manifest.shards)
    summary.raw_bytes, summary.num_bytes = manifest.raw_bytes, manifest.num_bytes
    summary.fingerprint, summary.seconds = manifest.fingerprint, time.perf_counter() - started
    return summary
