"""``ShardkitDatasink``: a Ray Data ``Datasink`` that writes a shardkit dataset.

Each write task encodes its rows and writes its own shards, ``shards/part-{task:05d}-{n:04d}.sks``,
through ``Store.write_atomic`` and returns a ``PartResult``. On the driver,
``on_write_complete`` orders the results by task index, merges schemas and skip lists, writes
``manifest.json`` last (atomically) and then deletes orphans: part files of this engine that the
manifest does not list (left by a killed attempt or an earlier, different run) and shards of a
replaced dataset. A failed job removes its part files and never writes a manifest
(specs/ray-packing.md Y1–Y6).

Imports ``ray`` at module level: import it only through ``ray_engine`` (which checks for Ray).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ray.data import Datasink
from ray.data.block import BlockAccessor

from shardkit import __version__
from shardkit.errors import EncodeError, ManifestError, SourceError
from shardkit.format import MANIFEST_NAME, Manifest, SampleEncoder, SchemaBuilder, decode_manifest
from shardkit.storage import Store, open_store
from shardkit.write.ray_parts import PART_PATTERN, PartOptions, PartResult, PartWriter, shard_infos
from shardkit.write.ray_rows import check_no_samples
from shardkit.write.sources import skip_entry

log = logging.getLogger(__name__)


class RowSource(Protocol):
    def items(self, table: Any, task_index: int, first_row: int) -> Iterable[tuple[str, Any]]: ...

    def sample(self, raw: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class SinkOptions:
    parts: PartOptions = PartOptions()
    metadata: dict[str, Any] = field(default_factory=dict)
    storage_options: dict[str, Any] = field(default_factory=dict)
    skip_bad: bool = False


class ShardkitDatasink(Datasink[PartResult]):
    """Write tasks produce parts; the driver publishes one manifest. Use once per job."""

    def __init__(self, out: str, rows: RowSource, options: SinkOptions, old_names: list[str]) -> None:
        self.out = out
        self.rows = rows
        self.options = options
        self.old_names = old_names  # shards of the dataset being replaced (overwrite)
        self.manifest: Manifest | None = None
        self.skipped: list[dict[str, str]] = []
        self.deleted: list[str] = []

    def get_name(self) -> str:
        return "ShardkitWrite"

    # ---- in the write tasks -----------------------------------------------------------------
    def write(self, blocks: Iterable[Any], ctx: Any) -> PartResult:
        store = open_store(self.out, self.options.storage_options)
        writer = PartWriter(store, int(ctx.task_idx), self.options.parts)
        encoder = SampleEncoder()
        first_row = 0
        for block in blocks:
            table = BlockAccessor.for_block(block).to_arrow()
            for origin, raw in self.rows.items(table, writer.result.task_index, first_row):
                try:
                    sample = self.rows.sample(raw)
                    data = encoder.encode(sample)
                except (SourceError, EncodeError) as exc:
                    if not self.options.skip_bad:
                        raise SourceError(_with_origin(origin, exc)) from None
                    writer.result.skipped.append(skip_entry(origin, exc))
                    continue
                writer.append(data, sample)
            first_row += table.num_rows
        return writer.finish()

    # ---- on the driver ----------------------------------------------------------------------
    def on_write_complete(self, write_result: Any) -> None:
        # Ray >= 2.39 passes a WriteResult; older versions the list of task returns.
        returns = getattr(write_result, "write_returns", write_result)
        results = sorted((r for r in returns if isinstance(r, PartResult)), key=lambda r: r.task_index)
        store = open_store(self.out, self.options.storage_options)
        self.manifest = publish_manifest(store, results, self.options.metadata)
        self.skipped = [s for r in results for s in r.skipped]
        self.deleted = delete_orphans(store, {s.name for s in self.manifest.shards}, self.old_names)

    def on_write_failed(self, error: Exception) -> None:
        store = open_store(self.out, self.options.storage_options)
        if store.exists(MANIFEST_NAME):  # a manifest published before a late failure stays valid
            return
        removed = delete_orphans(store, set(), [])
        log.warning("Ray write to %s failed; removed %d part file(s)", store.url, len(removed))


def _with_origin(origin: str, exc: Exception) -> str:
    text = str(exc)
    return text if text.startswith(origin) else f"{origin}: {text}"


def prepare_output(store: Store, overwrite: bool) -> list[str]:
    """Refuse to clobber a dataset unless ``overwrite``; then unpublish it. Old shard names."""
    if not store.exists(MANIFEST_NAME):
        return []
    where = store.url_of(MANIFEST_NAME)
    if not overwrite:
        raise FileExistsError(f"{where} exists; pass overwrite=True (CLI: --overwrite) to replace it")
    try:
        old = [s.name for s in decode_manifest(store.read(MANIFEST_NAME), where).shards]
    except ManifestError:
        old = []
    store.delete(MANIFEST_NAME)
    return old


def publish_manifest(store: Store, results: list[PartResult], metadata: dict[str, Any]) -> Manifest:
    """One manifest from the task results, in task order; written last, atomically."""
    indexes = [r.task_index for r in results]
    if len(set(indexes)) != len(indexes):  # one result per task: Ray reports successful attempts only
        raise ManifestError(f"{store.url}: two write results for one task index: {indexes}")
    schema = SchemaBuilder()
    for result in results:
        schema.update(result.schema, result.num_samples)
    skipped = [s for r in results for s in r.skipped]
    shards = tuple(s for r in results for s in shard_infos(r, f"{store.url}: task {r.task_index}"))
    check_no_samples(sum(r.num_samples for r in results), len(skipped), store.url)
    manifest = Manifest(
        shards=shards,
        schema=schema.to_dict(),
        metadata={**metadata, **({"skipped": skipped} if skipped else {})},
        created_by=f"shardkit {__version__}",
    )
    data = manifest.to_json()
    store.write_atomic(MANIFEST_NAME, data)
    return decode_manifest(data, store.url_of(MANIFEST_NAME))


def delete_orphans(store: Store, keep: set[str], old_names: list[str]) -> list[str]:
    """Delete this engine's files under shards/ not in ``keep``, and replaced shards. Sorted."""
    names = {n for n in store.list("shards") if PART_PATTERN.match(n)} | set(old_names)
    orphans = sorted(names - keep)
    for name in orphans:
        store.delete(name)
    if orphans:
        log.info("%s: deleted %d file(s) not in the manifest: %s", store.url, len(orphans), orphans[:5])
    return orphans
