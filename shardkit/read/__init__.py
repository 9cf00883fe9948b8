"""Reading datasets: manifests, shard readers, verification."""

from shardkit.read.dataset import StoredDataset, open_dataset
from shardkit.read.options import ReadOptions
from shardkit.read.shard_blocks import ByteSource
from shardkit.read.shard_reader import ShardReader
from shardkit.read.sources import LocalFileSource, StoreSource, open_source
from shardkit.read.stats import ReadStats

__all__ = [
    "ByteSource",
    "ReadOptions",
    "ReadStats",
    "StoredDataset",
    "LocalFileSource",
    "ShardReader",
    "StoreSource",
    "open_dataset",
    "open_source",
]
