"""``shardkit pack --engine ray``: pack on a Ray cluster through Ray Data (specs/ray-packing.md).

Sources become Ray datasets with a partitioning fixed by the input alone (never by the cluster
size), so the same input gives the same task indices, shard names, bytes and fingerprint:

- ``files``: the local engine's items (paths only), ``ITEMS_PER_TASK`` per ``from_items`` block;
- ``jsonl``, ``parquet`` and ``wds``: one row per file, expanded in the task by the local
  readers (``read_parquet`` merged small files into one task, losing parallelism, and cannot
  name a row's position in its file).

Ray is imported lazily; without it, ``RayNotInstalledError`` says how to install it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

from shardkit.errors import ShardkitError, SourceError
from shardkit.format import MANIFEST_NAME, CompressOptions, Manifest, decode_manifest
from shardkit.storage import open_store
from shardkit.units import parse_size
from shardkit.write import inputs, sources
from shardkit.write.lengths import combine_parts, write_length_files
from shardkit.write.output import Output
from shardkit.write.pack import PackOptions, PackSummary
from shardkit.write.ray.parts import OUTPUT_NAME_FORMAT, PARTS_FOLDER, PartOptions
from shardkit.write.ray.rows import DatasetRows, FileRows, ItemRows, encode_item

log = logging.getLogger(__name__)

ITEMS_PER_TASK = 1024
INSTALL_HINT = "packing on Ray needs Ray Data: pip install 'shardkit[ray]'"


class RayNotInstalledError(ShardkitError, ImportError):
    """``ray[data]`` is not installed."""


@dataclass
class RayPackSummary(PackSummary):
    """``PackSummary`` plus the orphan files deleted after the manifest was published."""

    num_tasks: int = 0
    deleted: list[str] = field(default_factory=list)


def require_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise RayNotInstalledError(f"{INSTALL_HINT} ({exc})") from None
    return ray


def pack_with_ray(
    src: str, out: str, options: PackOptions, address: str | None = None, progress: bool = True
) -> PackSummary:
    """Pack ``src`` into ``out`` on the Ray cluster at ``address`` (or the one already joined)."""
    if options.map is not None:
        raise SourceError("a map function (--map) runs with --engine local")
    ray = require_ray()
    started = time.perf_counter()
    joined = not ray.is_initialized()
    if joined:
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    try:
        ds, rows, extra, blocks = _source_dataset(src, options)
        options = PackOptions(**{**options.__dict__, "metadata": {**options.metadata, **extra}})
        if options.shuffle is None:
            summary = write_dataset(ds, out, options, rows, progress=progress, order={"shuffled": False})
        else:
            summary = _write_shuffled(ds, out, options, rows, blocks, progress)
    finally:
        if joined:
            ray.shutdown()
    summary.seconds = time.perf_counter() - started
    return summary


def write_dataset(ds: Any, out: str, options: PackOptions, rows: Any = None, progress: bool = True,
                  order: dict[str, Any] | None = None, found: Any = None) -> RayPackSummary:
    """Write the Ray dataset ``ds`` of dict rows as a shardkit dataset at ``out``; ``order`` is
    the manifest's (M9; None: the dataset's own order, ``{"shuffled": false}``). With ``found``
    (``shuffle.ShuffleSummary``), ``ds`` holds encoded samples (column ``data``) and
    ``found`` their schema and skipped records. A dataset being replaced stays whole and
    readable until the new manifest is published, and a failure leaves no file that no
    manifest names (``output.Output``, shard-format.md W5; Y1)."""
    require_ray()
    from shardkit.write.ray.sink import ShardkitDatasink

    started = time.perf_counter()
    order = {"shuffled": False} if order is None else order
    store = open_store(out, options.storage_options)
    output = Output(store, OUTPUT_NAME_FORMAT, options.overwrite)
    sink_options = replace(_sink_options(options), encoded=found is not None)
    sink = ShardkitDatasink(out, rows or DatasetRows(), sink_options, output.staging or PARTS_FOLDER)
    context = ds.context
    # Task indices name the shards: they must follow the input order, not completion order.
    context.execution_options.preserve_order = True
    context.enable_progress_bars = progress
    try:
        manifest = _write_and_publish(ds, sink, output, order, found)
    except BaseException as exc:
        _clean_after_failure(output)
        cause = _shardkit_cause(exc) if isinstance(exc, Exception) else None
        if cause is None:
            raise
        raise cause from None
    output.remove_leftovers(refuse_foreign=False)  # a killed attempt's temp files (Y3)
    return RayPackSummary(
        output=out,
        num_samples=manifest.num_samples,
        num_shards=len(manifest.shards),
        raw_bytes=manifest.raw_bytes,
        num_bytes=manifest.num_bytes,
        seconds=time.perf_counter() - started,
        fingerprint=manifest.fingerprint,
        skipped=list(manifest.metadata.get("skipped", [])),
        num_tasks=len({name.split("-")[1] for name in (s.name for s in manifest.shards)}),
        deleted=list(output.removed),
    )


def _clean_after_failure(output: Output) -> None:
    """Remove what the manifest in force does not name: the old dataset stays whole before the
    commit point, the new one after it (W5). A cleanup error must not hide the job's error."""
    try:
        output.remove_leftovers(refuse_foreign=False)
    except Exception as exc:  # the next writer into the folder removes the leftovers
        log.warning("%s: could not remove what the failed write left (%s)", output.store.url, exc)


def _write_and_publish(ds: Any, sink: Any, output: Output, order: dict[str, Any] | None, found: Any) -> Manifest:
    from shardkit.write.ray.sink import manifest_builder, result_shards

    ds.write_datasink(sink)
    url = output.store.url
    if sink.results is None:
        raise ShardkitError(f"{url}: Ray finished the write but never reported its results")
    build = manifest_builder(sink.results, dict(sink.options.metadata), order, url, found)
    files = combine_parts([(r.num_samples, r.lengths) for r in sink.results])
    lengths = write_length_files(output.store, output, files, [])  # a failure: remove_leftovers
    data = output.publish(result_shards(sink.results, url), build, lengths)
    return decode_manifest(data, output.store.url_of(MANIFEST_NAME))


def _write_shuffled(ds: Any, out: str, options: PackOptions, rows: Any, blocks: int,
                    progress: bool) -> RayPackSummary:
    """The local engine's key order (PS1) on Ray: encode, number, sort by key, write (Y7)."""
    from shardkit.write.ray.shuffle import shuffled

    shuffle = options.shuffle
    if shuffle is None:
        raise ValueError("_write_shuffled needs PackOptions.shuffle")
    store = open_store(out, options.storage_options)
    if not options.overwrite and store.exists(MANIFEST_NAME):  # before the encode step, not after
        raise FileExistsError(f"{store.url_of(MANIFEST_NAME)} exists; "
                              "pass overwrite=True (CLI: --overwrite) to replace it")
    ds.context.execution_options.preserve_order = True
    ds.context.enable_progress_bars = progress
    try:
        ordered, found = shuffled(ds, rows, shuffle, options.skip_bad, blocks)
    except Exception as exc:
        cause = _shardkit_cause(exc)
        if cause is None:
            raise
        raise cause from None
    return write_dataset(ordered, out, options, progress=progress, order=shuffle.describe(), found=found)


def _sink_options(options: PackOptions) -> Any:
    from shardkit.write.ray.sink import SinkOptions

    parts = PartOptions(
        shard_size=max(1, parse_size(options.shard_size)),
        block_size=max(1, parse_size(options.block_size)),
        compress=CompressOptions(compression=options.compression, level=options.level),
        layout=options.layout,
    )
    return SinkOptions(parts, dict(options.metadata), dict(options.storage_options), options.skip_bad)


def _source_dataset(src: str, options: PackOptions) -> tuple[Any, Any, dict[str, Any], int]:
    """The Ray dataset for a raw source, the ``RowSource`` that decodes it, extra metadata and
    the number of blocks. Rows carry their source position when the pack shuffles (Y7)."""
    import ray.data

    from shardkit.write.ray.shuffle import with_ordinals

    def numbered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return rows if options.shuffle is None else with_ordinals(rows)

    fmt = inputs.detect_format(src) if options.fmt == "auto" else options.fmt
    if fmt == "files":
        items, classes = sources.iter_files(os.path.abspath(src), options.label_from_dir, auto=options.fmt == "auto")
        rows = [{"item": encode_item(item)} for item in items]
        if not rows:
            raise SourceError(f"{src}: no samples to pack")
        blocks = math.ceil(len(rows) / ITEMS_PER_TASK)
        extra = {"classes": classes} if classes else {}
        return ray.data.from_items(numbered(rows), override_num_blocks=blocks), ItemRows(), extra, blocks
    if fmt in ("jsonl", "wds", "parquet"):
        files = [os.path.abspath(f) for f in sources.input_files(src, fmt)]
        per_file = ray.data.from_items(numbered([{"file": f} for f in files]), override_num_blocks=len(files))
        return per_file, FileRows(fmt), {}, len(files)
    raise SourceError(f"--engine ray reads files, jsonl, parquet and wds, not {fmt!r}; use --engine local")


def _shardkit_cause(exc: BaseException) -> BaseException | None:
    """The original shardkit error inside Ray's wrappers (RayTaskError, UserCodeException)."""
    from ray.exceptions import RayTaskError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ShardkitError, FileExistsError)) and not isinstance(current, RayTaskError):
            return current
        cause = getattr(current, "cause", None)
        current = cause if isinstance(cause, BaseException) else (current.__cause__ or current.__context__)
    return None
