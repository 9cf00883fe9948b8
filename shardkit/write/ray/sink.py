"""``ShardkitDatasink``: a Ray Data ``Datasink`` that writes a shardkit dataset's shards.

Each write task encodes its rows and writes its own shards, ``part-{task:05d}-{n:04d}.sks``,
through ``Store.write_atomic`` into the folder the driver chose (``shards/``, or the staging
folder when a dataset is being replaced) and returns a ``PartResult``. ``on_write_complete``
only collects the results, in task order; the driver (``ray_engine.write_dataset``) checks them
and publishes the manifest through ``output.Output`` — the same commit point and cleanup as the
local engine (shard-format.md W5; specs/ray-packing.md Y1–Y3).

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
from shardkit.format import Manifest, SampleEncoder, SchemaBuilder, ShardInfo
from shardkit.format.length_index import LengthsInfo
from shardkit.storage import open_store
from shardkit.write.output import BuildManifest
from shardkit.write.ray.parts import PARTS_FOLDER, PartOptions, PartResult, PartWriter, shard_infos
from shardkit.write.ray.rows import check_no_samples
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
    encoded: bool = False  # rows are already encoded samples, column ``data`` (the shuffle, Y7)


class ShardkitDatasink(Datasink[PartResult]):
    """Write tasks produce parts into ``folder``; the driver publishes. Use once per job."""

    def __init__(self, out: str, rows: RowSource, options: SinkOptions, folder: str = PARTS_FOLDER) -> None:
        self.out = out
        self.rows = rows
        self.options = options
        self.folder = folder
        self.results: list[PartResult] | None = None  # set on the driver when every task succeeded

    def get_name(self) -> str:
        return "ShardkitWrite"

    # ---- in the write tasks -----------------------------------------------------------------
    def write(self, blocks: Iterable[Any], ctx: Any) -> PartResult:
        store = open_store(self.out, self.options.storage_options)
        writer = PartWriter(store, int(ctx.task_idx), self.options.parts, self.folder)
        encoder = SampleEncoder()
        first_row = 0
        for block in blocks:
            table = BlockAccessor.for_block(block).to_arrow()
            if self.options.encoded:
                for data in table.column("data").to_pylist():
                    writer.append(data, None)
                continue
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
        self.results = sorted((r for r in returns if isinstance(r, PartResult)), key=lambda r: r.task_index)


def _with_origin(origin: str, exc: Exception) -> str:
    text = str(exc)
    return text if text.startswith(origin) else f"{origin}: {text}"


def manifest_builder(results: list[PartResult], metadata: dict[str, Any], order: dict[str, Any] | None,
                     url: str, found: Any = None) -> BuildManifest:
    """Check the task results (one per task, some samples) and return ``build(shards, lengths)``, the
    manifest bytes for the results' shards under the names ``Output.publish`` gives them.
    ``found`` (a ``shuffle.ShuffleSummary``): the schema and skipped records, in source
    order, of rows the tasks received already encoded."""
    indexes = [r.task_index for r in results]
    if len(set(indexes)) != len(indexes):  # one result per task: Ray reports successful attempts only
        raise ManifestError(f"{url}: two write results for one task index: {indexes}")
    schema = SchemaBuilder()
    for result in results:
        schema.update(result.schema, result.num_samples)
    fields = schema.to_dict() if found is None else found.schema
    skipped = [s for r in results for s in r.skipped] if found is None else list(found.skipped)
    check_no_samples(sum(r.num_samples for r in results), len(skipped), url)
    full = {**metadata, **({"skipped": skipped} if skipped else {})}

    def build(shards: tuple[ShardInfo, ...], lengths: tuple[LengthsInfo, ...] = ()) -> bytes:
        return Manifest(shards=shards, schema=fields, metadata=full,
                        created_by=f"shardkit {__version__}", order=order, lengths=lengths).to_json()

    return build


def result_shards(results: list[PartResult], url: str) -> tuple[ShardInfo, ...]:
    """Every task's shard entries, in task order (Y2)."""
    return tuple(s for r in results for s in shard_infos(r, f"{url}: task {r.task_index}"))
