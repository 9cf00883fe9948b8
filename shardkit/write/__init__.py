"""Writing datasets: ``ShardWriter`` and the ``pack`` sources and engines."""

from shardkit.write.shuffle import ShuffledWriter, ShuffleOptions
from shardkit.write.writer import ShardWriter, WriterOptions

__all__ = ["ShardWriter", "ShuffleOptions", "ShuffledWriter", "WriterOptions"]
