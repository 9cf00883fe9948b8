"""I/O only: stores over fsspec URLs and the node-local shard cache.

Public names: ``Store``/``open_store`` (read, read_range, read_suffix, write_atomic …),
``RetryPolicy``, ``ShardCache`` with ``CacheOptions``/``CacheItem`` (download-once leases, LRU
eviction), ``Prefetcher``, and ``list_cache``/``clear_cache`` for the CLI. Contracts: specs/cache.md.
"""

from shardkit.storage.admin import clear_cache, list_cache
from shardkit.storage.cache import CacheItem, CacheOptions, CacheStats, ShardCache
from shardkit.storage.prefetch import Prefetcher
from shardkit.storage.retry import RetryPolicy, call_with_retry
from shardkit.storage.store import Store, open_store, split_protocol

__all__ = [
    "CacheItem",
    "CacheOptions",
    "CacheStats",
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
