"""The torch layer: ``StreamingDataset``, ``ShardLoader``, ``Ragged`` batches, stats."""

from shardkit.loader.collate import collate_samples
from shardkit.loader.dataset import StreamingDataset
from shardkit.loader.device import DevicePrefetcher, to_device
from shardkit.loader.ragged import Ragged
from shardkit.loader.shard_loader import ShardLoader

__all__ = ["DevicePrefetcher", "Ragged", "ShardLoader", "StreamingDataset", "collate_samples", "to_device"]
