"""File names inside a cache dir (specs/cache.md, "Layout").

::

    <cache_dir>/v1/<entry>.data                  published, verified shard bytes (mtime = last use)
    <cache_dir>/v1/<entry>.lock                  flock target; holds the downloader's pid
    <cache_dir>/v1/<entry>.json                  sidecar: key, url, dataset, size, created
    <cache_dir>/v1/<entry>.tmp-<pid>-<hex>       download in progress (never read)
    <cache_dir>/v1/.space.lock                   serialises space accounting + eviction

``<entry>`` is the caller's key made filename-safe: percent-encoded, and if long, truncated with a
sha256 of the whole key appended, so distinct keys never share an entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from shardkit.storage.cache_files import check_dir, create_new, make_dir
from shardkit.storage.shared_reads import UntrustedFileError, loads_json, read_small

LAYOUT_DIR = "v1"
SPACE_LOCK = ".space.lock"
DATA_SUFFIX = ".data"
LOCK_SUFFIX = ".lock"
META_SUFFIX = ".json"
TEMP_MARK = ".tmp-"
_MAX_QUOTED = 160
_MAX_META_BYTES = 64 * 1024
_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "key": str, "url": str, "dataset": str, "size": int, "created": (int, float)}


def entry_name(key: str) -> str:
    """The filename-safe entry name of ``key`` (injective: different keys, different names)."""
    if not key:
        raise ValueError("cache key must be a non-empty string")
    quoted = "e-" + quote(key, safe="-_.")
    if len(quoted) <= _MAX_QUOTED:
        return quoted
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
    return f"{quoted[:_MAX_QUOTED - 34]}~{digest}"


def key_from_name(name: str) -> str:
    """Best-effort inverse of ``entry_name`` (exact unless the name was truncated)."""
    return unquote(name[2:] if name.startswith("e-") else name)


def dataset_prefix(key: str) -> str:
    """The part of a key before its first ``/`` (by convention the dataset fingerprint)."""
    return key.split("/", 1)[0]


@dataclass(frozen=True)
class Entry:
    """Paths of one cache entry."""

    root: str
    name: str

    @property
    def data(self) -> str:
        return os.path.join(self.root, self.name + DATA_SUFFIX)

    @property
    def lock(self) -> str:
        return os.path.join(self.root, self.name + LOCK_SUFFIX)

    @property
    def meta(self) -> str:
        return os.path.join(self.root, self.name + META_SUFFIX)

    def new_temp(self) -> str:
        unique = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        return os.path.join(self.root, f"{self.name}{TEMP_MARK}{unique}")

    def is_own_temp(self, filename: str) -> bool:
        return filename.startswith(self.name + TEMP_MARK)


def layout_root(cache_dir: str) -> str:
    return os.path.join(os.path.abspath(cache_dir), LAYOUT_DIR)


def ensure_root(cache_dir: str) -> str:
    """Create ``<cache_dir>/v1`` if missing and check both folders (K14); return ``v1``.

    ``cache_dir`` may be a link (the user named it); ``v1`` inside it must be a real folder.
    """
    base = os.path.abspath(cache_dir)
    os.makedirs(os.path.dirname(base), exist_ok=True)
    make_dir(base)
    check_dir(base, follow=True)
    root = layout_root(cache_dir)
    make_dir(root)
    check_dir(root, follow=False)
    return root


def entry_of_filename(root: str, filename: str) -> Entry | None:
    """The entry a file in ``root`` belongs to (data, lock, sidecar or temp), if any."""
    if not filename.startswith("e-"):
        return None
    if TEMP_MARK in filename:
        return Entry(root, filename.split(TEMP_MARK, 1)[0])
    for suffix in (DATA_SUFFIX, LOCK_SUFFIX, META_SUFFIX):
        if filename.endswith(suffix):
            return Entry(root, filename[: -len(suffix)])
    return None


def write_meta(entry: Entry, key: str, url: str, num_bytes: int, dataset: str) -> None:
    """Publish the sidecar atomically; failures only cost ``cache ls`` its key text."""
    record: dict[str, Any] = {"key": key, "url": url, "dataset": dataset, "size": num_bytes,
                              "created": time.time()}
    tmp = entry.new_temp() + ".meta"
    try:
        with os.fdopen(create_new(tmp), "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(tmp, entry.meta)  # replaces a planted link itself, never what it points at
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def read_meta(entry: Entry) -> dict[str, Any]:
    """The sidecar's record, its fields of the types the cache writes; {} when missing,
    unreadable, not a regular file, too large or not such a record (K40: another member of
    the cache dir's group may have written it)."""
    try:
        record = loads_json(read_small(entry.meta, _MAX_META_BYTES), entry.meta)
    except (OSError, UntrustedFileError):  # CacheError (a planted link) is an OSError
        return {}
    if not isinstance(record, dict):
        return {}
    return {name: value for name, value in record.items() if name in _META_TYPES
            and isinstance(value, _META_TYPES[name]) and not isinstance(value, bool)}
