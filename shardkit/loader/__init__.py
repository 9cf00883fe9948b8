"""The torch layer: ``StreamingDataset``, ``ShardLoader``, ``Ragged`` batches, stats."""

from shardkit.loader.collate import collate_samples
from shardkit.loader.dataset import StreamingDataset
from shardkit.loader.ragged import Ragged
from shardkit.loader.shard_loader import ShardLoader

__all__ = ["Ragged", "ShardLoader", "StreamingDataset", "collate_samples"]
