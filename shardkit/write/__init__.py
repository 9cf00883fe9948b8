"""Writing datasets: ``ShardWriter`` and the ``pack`` sources and engines."""

from shardkit.write.writer import ShardWriter, WriterOptions

__all__ = ["ShardWriter", "WriterOptions"]
