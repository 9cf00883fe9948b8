"""I/O only: stores (local files, memory, fsspec, S3) and the node-local shard cache.

Public names: the ``Store`` protocol and ``open_store`` (read, read_range, read_ranges, stat,
write_atomic …: specs/store.md), ``MemoryStore``, ``ObjectStat``,
``RetryPolicy``, ``ShardCache`` with ``CacheOptions``/``CacheItem`` (download-once leases, LRU
eviction), ``Prefetcher``, and ``list_cache``/``clear_cache`` for the CLI. Contracts: specs/store.md (the
store protocol), specs/cache.md (the cache).
"""

from shardkit.storage.admin import clear_cache, list_cache
from shardkit.storage.cache import CacheItem, CacheOptions, CacheStats, ShardCache
from shardkit.storage.memory_store import MemoryStore
from shardkit.storage.prefetch import Prefetcher
from shardkit.storage.registry import open_store, split_protocol
from shardkit.storage.retry import RetryPolicy, call_with_retry
from shardkit.storage.store import ObjectStat, Store

__all__ = [
    "CacheItem",
    "CacheOptions",
    "CacheStats",
    "MemoryStore",
    "ObjectStat",
    "Prefetcher",
    "RetryPolicy",
    "ShardCache",
    "Store",
    "call_with_retry",
    "clear_cache",
    "list_cache",
    "open_store",
    "split_protocol",
]
