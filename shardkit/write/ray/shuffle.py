"""Pack-time shuffle on Ray Data: the local engine's key order (specs/pack-shuffle.md PS1, PS6;
specs/ray-packing.md Y7).

Three steps, each a Ray Data operation whose result depends on the input alone:

1. **Encode** (``map_batches``): every source row carries its position in the source
   (``ORDINAL``). A batch's rows are decoded and encoded exactly as the write tasks do it
   (``RowSource``, ``SampleEncoder``); the batch returns one row per encoded sample
   (``src`` = the batch's first ordinal, ``pos`` = the sample's position among the batch's
   encoded samples, ``data``) plus one *summary* row (``pos = -1``: sample count, schema and
   skipped records). Batches cover disjoint, increasing ordinal ranges however Ray cuts them.
2. **Number** (driver): the summaries, in ordinal order, give each batch's first sample index
   ``i0``, so sample ``(src, pos)`` is sample ``i = i0[src] + pos`` of the source after
   ``--skip-bad`` — the local engine's numbering — and gets ``sort_keys(seed, i)``. The schema
   is merged and the skipped records listed in source order (PS5).
3. **Sort** (``Dataset.sort`` with fixed ``boundaries``): keys are distinct, so the order is
   unique; the boundaries split the 64-bit key range evenly into ``partitions`` ranges (a
   function of the input), so the write tasks, and so shard names and bytes, do not depend on
   the cluster or on Ray's sampling. Keys are stored as int64 with the top bit flipped
   (``key ^ 2**63``), an order-preserving map that Arrow sorts natively.

Imports ``ray``/``pyarrow`` lazily inside the functions that run on the driver or in tasks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardkit.errors import EncodeError, SourceError
from shardkit.format import SampleEncoder, SchemaBuilder
from shardkit.write.shuffle import ShuffleOptions, sort_keys

ORDINAL = "__shardkit_ordinal"
KEY = "key"
DATA = "data"
_FLIP = np.uint64(1 << 63)
PIECE_BYTES = 64 << 20  # encoded bytes per table the encode step yields


@dataclass
class ShuffleSummary:
    """What the encode step found, in source order: the schema and the skipped records."""

    schema: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    num_samples: int = 0


class EncodeBatch:
    """``map_batches`` function: a pyarrow batch of source rows → encoded samples + a summary."""

    def __init__(self, rows: Any, skip_bad: bool) -> None:
        self.rows = rows
        self.skip_bad = skip_bad

    def __call__(self, table: Any) -> Iterator[Any]:
        """Yield the batch's encoded samples in pieces of about ``PIECE_BYTES`` (a task never
        holds a whole input file's samples), then its summary row."""
        first = int(table.column(ORDINAL)[0].as_py()) if table.num_rows else -1
        encoder, schema = SampleEncoder(), SchemaBuilder()
        piece: list[bytes] = []
        held = count = 0
        skipped: list[dict[str, str]] = []
        for origin, raw in self.rows.items(table.drop([ORDINAL]), 0, 0):
            try:
                sample = self.rows.sample(raw)
                piece.append(encoder.encode(sample))
            except (SourceError, EncodeError) as exc:
                if not self.skip_bad:
                    text = str(exc)
                    raise SourceError(text if text.startswith(origin) else f"{origin}: {text}") from None
                skipped.append({"origin": origin, "error": str(exc)})
                continue
            schema.observe(sample)
            held += len(piece[-1])
            if held >= PIECE_BYTES:
                yield _rows(first, count, piece)
                count, piece, held = count + len(piece), [], 0
        if piece:
            yield _rows(first, count, piece)
            count += len(piece)
        summary = json.dumps({"n": count, "schema": schema.fields, "skipped": skipped}).encode()
        yield _rows(first, -1, [summary])


def _rows(src: int, first_pos: int, data: list[bytes]) -> Any:
    import pyarrow as pa

    return pa.table({
        "src": pa.array([src] * len(data), pa.int64()),
        "pos": pa.array(range(first_pos, first_pos + len(data)), pa.int64()),
        DATA: pa.array(data, pa.large_binary()),
    })


class AddKeys:
    """``map_batches`` function: encoded sample rows → ``key`` (flipped int64) and ``data``."""

    def __init__(self, first_index: dict[int, int], seed: int) -> None:
        self.first_index = first_index
        self.seed = seed

    def __call__(self, table: Any) -> Any:
        import pyarrow as pa

        src = table.column("src").to_numpy()
        index = np.array([self.first_index[int(s)] for s in src], dtype=np.int64) + table.column("pos").to_numpy()
        keys = run_keys(self.seed, index)
        flipped = (keys ^ _FLIP).view(np.int64)
        return pa.table({KEY: pa.array(flipped, pa.int64()), DATA: table.column(DATA)})


def run_keys(seed: int, index: np.ndarray) -> np.ndarray:
    """``sort_keys`` of arbitrary sample indices, one vectorised call per run of consecutive ones."""
    keys = np.empty(len(index), dtype=np.uint64)
    if not len(index):
        return keys
    starts = np.flatnonzero(np.diff(index, prepend=index[:1] - 2) != 1)
    for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(index)], strict=True):
        keys[start:end] = sort_keys(seed, int(index[start]), end - start)
    return keys


def with_ordinals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The source rows, each with its position in the source."""
    return [{**row, ORDINAL: i} for i, row in enumerate(rows)]


def shuffled(ds: Any, rows: Any, options: ShuffleOptions, skip_bad: bool,
             partitions: int) -> tuple[Any, ShuffleSummary]:
    """``ds`` (source rows with ``ORDINAL``) → a dataset of ``data`` rows in key order, split
    into ``partitions`` blocks by key range, and the summary of the encode step."""
    encoded = ds.map_batches(EncodeBatch(rows, skip_bad), batch_format="pyarrow", batch_size=None).materialize()
    heads = encoded.map_batches(_summary_rows, batch_format="pyarrow").take_all()
    summary, first_index = number(sorted((int(r["src"]), bytes(r[DATA])) for r in heads))
    samples = encoded.map_batches(_sample_rows, batch_format="pyarrow")
    keyed = samples.map_batches(AddKeys(first_index, options.seed), batch_format="pyarrow")
    return keyed.sort(KEY, boundaries=key_boundaries(partitions)).select_columns([DATA]), summary


def _summary_rows(table: Any) -> Any:
    import pyarrow.compute as pc

    return table.filter(pc.less(table.column("pos"), 0))


def _sample_rows(table: Any) -> Any:
    import pyarrow.compute as pc

    return table.filter(pc.greater_equal(table.column("pos"), 0))


def number(heads: list[tuple[int, bytes]]) -> tuple[ShuffleSummary, dict[int, int]]:
    """Batch summaries in ordinal order → the merged summary and each batch's first index."""
    summary, schema = ShuffleSummary(), SchemaBuilder()
    first_index: dict[int, int] = {}
    for src, data in heads:
        head = json.loads(data)
        first_index[src] = summary.num_samples
        schema.update(head["schema"], head["n"])
        summary.skipped.extend(head["skipped"])
        summary.num_samples += head["n"]
    summary.schema = schema.to_dict()
    return summary, first_index


def key_boundaries(partitions: int) -> list[int]:
    """``partitions - 1`` flipped-int64 keys splitting the key range evenly."""
    step = (1 << 64) // max(1, partitions)
    return [j * step - (1 << 63) for j in range(1, max(1, partitions))]
