"""Inspect and clear a cache dir, for ``shardkit cache ls|clear`` (pure functions, no store).

Both are safe while training runs: an entry is "in use" when its lock cannot be taken
exclusively without waiting, and ``clear_cache`` skips those (K5).
"""

from __future__ import annotations

import os
import time
from typing import Any

from shardkit.storage.cache_layout import dataset_prefix, key_from_name, layout_root, read_meta
from shardkit.storage.eviction import remove_entry, remove_temps, scan, try_exclusive
from shardkit.storage.locks import FileLock
from shardkit.storage.next_use import read_next_uses


def list_cache(cache_dir: str) -> list[dict[str, Any]]:
    """One dict per published entry, least recently used first.

    Keys: ``key``, ``dataset`` (the store URL the entry came from; else the key's prefix
    before its first ``/``), ``url``, ``path``,
    ``size`` (bytes), ``last_use`` (unix time), ``in_use`` (a lease or download holds it).
    """
    root = layout_root(cache_dir)
    rows: list[dict[str, Any]] = []
    for item in sorted(scan(root).values(), key=lambda s: s.last_use):
        if not item.published:
            continue
        meta = read_meta(item.entry)
        key = str(meta.get("key") or key_from_name(item.entry.name))
        rows.append({
            "key": key,
            "dataset": meta.get("dataset") or dataset_prefix(key),
            "url": meta.get("url"),
            "path": item.entry.data,
            "size": item.size,
            "last_use": item.last_use,
            "in_use": _in_use(item.entry.lock),
        })
    return rows


def clear_cache(cache_dir: str, older_than_seconds: float | None = None) -> tuple[int, int]:
    """Remove entries not used for ``older_than_seconds`` (all if None), skipping in-use ones.

    Returns ``(entries removed, bytes freed)``. Leftover temp files of dead downloads are
    removed too (their bytes count, not their number).
    """
    root = layout_root(cache_dir)
    read_next_uses(root)  # removes the lists dead consumers published (K32)
    cutoff = None if older_than_seconds is None else time.time() - older_than_seconds
    count = freed = 0
    for item in scan(root).values():
        if cutoff is not None and item.published and item.last_use > cutoff:
            continue
        lock = FileLock(item.entry.lock)
        if not try_exclusive(lock):
            continue
        try:
            remove_temps(item.temps)
            freed += item.temp_bytes
            if item.published and remove_entry(item.entry, lock):
                count += 1
                freed += item.size
        finally:
            lock.release()
    return count, freed


def _in_use(lock_path: str) -> bool:
    if not os.path.lexists(lock_path):
        return False
    lock = FileLock(lock_path)
    if try_exclusive(lock):
        lock.release()
        return False
    return True
