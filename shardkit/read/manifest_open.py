"""Open a dataset's manifest: once per node through the node cache (K18), and through its
binary companion when the JSON is large (specs/manifest.md M14, M15).

With a node cache, every process asks the store for the manifest's version (one HEAD) and
reads the bytes from the cache entry of that version, which the first process of the node
downloaded (one GET per node and version, K3). A republished manifest has another version,
so the next open fetches it anew; an open already under way keeps the manifest it read.

A manifest.json of ``COMPANION_MIN_BYTES`` or more is not parsed when ``manifest.bin`` is
there and bound to it (M15): the reader hashes the JSON (streamed, no copy) and decodes the
companion's columns instead. A missing, stale or damaged companion is logged and the JSON
parsed: the JSON is the source of truth.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator

from shardkit.errors import CacheError, ManifestError, NotFoundError
from shardkit.format import MANIFEST_NAME, Manifest, decode_manifest
from shardkit.format.checksum import StreamingChecksum, xxh64_text
from shardkit.format.manifest_companion import COMPANION_MIN_BYTES, COMPANION_NAME, decode_companion
from shardkit.storage import ShardCache, Store
from shardkit.storage.local_files import open_regular_file, read_regular_file

log = logging.getLogger(__name__)
_HASH_CHUNK = 1 << 20


def load_manifest(store: Store, cache: ShardCache | None = None) -> Manifest:
    """The validated manifest of the dataset in ``store`` (``cache``: the node cache)."""
    where = store.url_of(MANIFEST_NAME)
    try:
        with _local_copy(store, cache) as path:
            if path is not None:
                return _from_file(store, cache, path, where)
            data = store.read(MANIFEST_NAME)
    except NotFoundError:
        raise NotFoundError(f"{where}: no manifest (not a shardkit dataset, or packing did not finish)") from None
    if len(data) >= COMPANION_MIN_BYTES:
        found = _companion(store, None, xxh64_text(data))
        if found is not None:
            return found
    return decode_manifest(data, where)


@contextlib.contextmanager
def _local_copy(store: Store, cache: ShardCache | None) -> Iterator[str | None]:
    """A local path of manifest.json: the file itself, or a lease on the node cache's copy of
    its current version; None without a cache."""
    if store.is_local:
        yield store.local_path(MANIFEST_NAME)
        return
    if cache is None:
        yield None
        return
    size, version = store.version(MANIFEST_NAME)
    digest = hashlib.sha256(f"{store.url}\0{version}\0{size}".encode()).hexdigest()[:32]
    with contextlib.ExitStack() as stack:
        try:
            path: str | None = stack.enter_context(
                cache.open(store, MANIFEST_NAME, key=f"manifest-{digest}", num_bytes=size))
        except CacheError as exc:  # e.g. a cache limit below the manifest's size (K7)
            log.warning("%s: not kept in the node cache (%s); reading it from the store",
                        store.url_of(MANIFEST_NAME), exc)
            path = None
        yield path


def _from_file(store: Store, cache: ShardCache | None, path: str, where: str) -> Manifest:
    fd, size = open_regular_file(path, "manifest")  # never a FIFO or device (a local dataset's)
    try:
        if size >= COMPANION_MIN_BYTES:
            found = _companion(store, cache, _file_checksum(fd))
            if found is not None:
                return found
    finally:
        os.close(fd)
    try:
        return decode_manifest(read_regular_file(path, "manifest"), where)
    except ManifestError as exc:
        if store.is_local:
            raise
        # A cached copy torn by a republish between chunks: the store's own copy decides.
        log.warning("%s: the node cache's copy does not decode (%s); reading it from the store", where, exc)
        return decode_manifest(store.read(MANIFEST_NAME), where)


def _file_checksum(fd: int) -> str:
    checksum = StreamingChecksum()
    while chunk := os.read(fd, _HASH_CHUNK):
        checksum.update(chunk)
    return checksum.text()


def _companion(store: Store, cache: ShardCache | None, json_checksum: str) -> Manifest | None:
    """The manifest from ``manifest.bin`` if it is there and bound to ``json_checksum``."""
    where = store.url_of(COMPANION_NAME)
    try:
        data = _cached_read(store, cache, COMPANION_NAME, f"manifest-bin-{json_checksum.split(':')[-1]}")
        return decode_companion(data, json_checksum, where)
    except NotFoundError:
        log.info("%s: no manifest companion; parsing the (large) manifest.json", where)
    except ManifestError as exc:
        log.warning("%s is not used: %s", where, exc)
    return None


def _cached_read(store: Store, cache: ShardCache | None, name: str, key: str) -> bytes:
    """``name``'s bytes through the node cache under ``key`` (straight from the store without
    a cache, for a local store, or when the cache cannot hold it)."""
    if store.is_local or cache is None:
        return store.read(name)
    size = store.size(name)
    try:
        with cache.open(store, name, key=key, num_bytes=size) as path:
            return read_regular_file(path, "manifest companion")
    except CacheError as exc:
        log.warning("%s: not kept in the node cache (%s); reading it from the store", store.url_of(name), exc)
        return store.read(name)
