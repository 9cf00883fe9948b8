"""Write any ``ray.data.Dataset`` of dict rows as a shardkit dataset (extra ``ray``).

    import ray, shardkit.ray
    ds = ray.data.read_parquet("s3://raw/") .map(tokenize)
    summary = shardkit.ray.write(ds, "s3://bucket/ds", shard_size="64MiB")

Each Ray write task writes its own shards; the driver writes one manifest last. Shard names
follow the dataset's input partitioning, so the same dataset with the same partitioning (pin it
with ``override_num_blocks``) gives the same manifest and fingerprint (specs/ray-packing.md).
Sets ``ds.context.execution_options.preserve_order = True``.
"""

from __future__ import annotations

from typing import Any

from shardkit.write.pack import PackOptions, PackSummary

__all__ = ["write"]


def write(
    ds: Any,
    out: str,
    *,
    shard_size: int | str = "64MiB",
    block_size: int | str = "1MiB",
    level: int = 3,
    compression: str = "auto",
    metadata: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
    overwrite: bool = False,
    skip_bad: bool = False,
) -> PackSummary:
    """Pack ``ds`` into a dataset at ``out`` (path or fsspec URL); returns the summary.

    Rows are normalised like Parquet rows: numeric lists and tensor columns become numpy
    arrays, other values plain Python. A row that cannot be encoded fails the job naming its
    task and row (``skip_bad=True``: skipped and listed in ``metadata["skipped"]``).
    """
    from shardkit.write.ray.engine import write_dataset

    options = PackOptions(
        shard_size=shard_size,
        block_size=block_size,
        level=level,
        compression=compression,
        metadata=dict(metadata or {}),
        overwrite=overwrite,
        skip_bad=skip_bad,
        storage_options=dict(storage_options or {}),
        shuffle=None,  # rows are written in the dataset's order (ds.random_shuffle(seed=...) to mix)
    )
    return write_dataset(ds, out, options, progress=True)
