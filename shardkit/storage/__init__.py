"""I/O only: stores over fsspec URLs and the node-local shard cache."""

from shardkit.storage.store import Store, open_store, split_protocol

__all__ = ["Store", "open_store", "split_protocol"]
