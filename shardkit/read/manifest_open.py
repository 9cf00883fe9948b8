"""Open a dataset's manifest: once per node through the node cache (K18), and through its
binary companion when the JSON is large (specs/manifest.md M14, M15).

With a node cache, every process asks the store for the manifest's version (one HEAD) and
reads the bytes from the cache entry of that version, which the first process of the node
downloaded (one GET per node and version, K3). A republished manifest has another version,
so the next open fetches it anew; an open already under way keeps the manifest it read.

Nothing in a shared cache dir is trusted (K44): a cached copy is used only when it holds the
bytes the store holds: its MD5 is the ETag this process got from the store, or the file is
this user's own, written by the cache straight from the store and writable by nobody else;
any other copy is logged and the manifest read from the store. When the store cannot be
reached, the copy this user sealed (or, with ``offline="trust-cache"``, any copy) of the last
version this user opened is used instead, with one warning (K47, K48: read/manifest_offline.py).

A manifest.json of ``COMPANION_MIN_BYTES`` or more is not parsed when ``manifest.bin`` decodes
and re-encodes to exactly that JSON (M15, M20): the JSON is the source of truth. A missing,
stale, damaged or forged companion is logged and the JSON parsed.
"""

from __future__ import annotations

import logging
import os

from shardkit.errors import CacheError, ManifestError, NotFoundError, StorageError
from shardkit.format import MANIFEST_NAME, Manifest, decode_manifest
from shardkit.format.checksum import xxh64_text
from shardkit.format.companion_json import describes_json
from shardkit.format.manifest_companion import COMPANION_MIN_BYTES, COMPANION_NAME, decode_companion
from shardkit.read.manifest_offline import OFFLINE_MODES, UNREACHABLE, manifest_key, offline_copy, record_latest
from shardkit.storage import ShardCache, Store
from shardkit.storage.cache_files import sealed_by_self
from shardkit.storage.etag import matches_etag
from shardkit.storage.local_files import open_regular_file, read_regular_file

log = logging.getLogger(__name__)


def load_manifest(store: Store, cache: ShardCache | None = None, offline: str = "sealed") -> Manifest:
    """The validated manifest of the dataset in ``store`` (``cache``: the node cache; ``offline``:
    which cached copy may stand in for an unreachable store, one of ``OFFLINE_MODES``, K48)."""
    if offline not in OFFLINE_MODES:
        raise ValueError(f"offline={offline!r}: expected one of {', '.join(OFFLINE_MODES)}")
    where = store.url_of(MANIFEST_NAME)
    try:
        data, cached = _manifest_bytes(store, cache, offline)
    except NotFoundError:
        raise NotFoundError(f"{where}: no manifest (not a shardkit dataset, or packing did not finish)") from None
    if cached == "offline":  # no store to read a companion or a fresh copy from
        return decode_manifest(data, where)
    if len(data) >= COMPANION_MIN_BYTES:
        found = _companion(store, cache, data)
        if found is not None:
            return found
    try:
        return decode_manifest(data, where)
    except ManifestError as exc:
        if not cached:
            raise
        # Our own copy, torn by a republish between its chunks: the store's copy decides.
        log.warning("%s: the node cache's copy does not decode (%s); reading it from the store", where, exc)
        return decode_manifest(store.read(MANIFEST_NAME), where)


def _manifest_bytes(store: Store, cache: ShardCache | None, offline: str) -> tuple[bytes, str]:
    """manifest.json's bytes, and where from: ``""`` (the store), ``"cache"``, ``"offline"``."""
    local = store.local_path(MANIFEST_NAME)
    if local is not None:
        return read_regular_file(local, "manifest"), ""
    if cache is not None:
        try:
            data = _cached_copy(store, cache)
        except UNREACHABLE as exc:
            if offline == "never":
                raise
            copy = offline_copy(cache, store.url, offline, exc)
            log.warning("%s: the store cannot be reached (%s); running OFFLINE from the node cache: "
                        "manifest from %s%s", store.url_of(MANIFEST_NAME), exc, copy.path,
                        " (offline='trust-cache': not checked to be this user's)" if offline == "trust-cache" else "")
            return copy.data, "offline"
        if data is not None:
            return data, "cache"
    return store.read(MANIFEST_NAME), ""


def _cached_copy(store: Store, cache: ShardCache) -> bytes | None:
    """The node cache's copy of the manifest's current version if it is the store's (K44)."""
    where = store.url_of(MANIFEST_NAME)
    size, version = store.stat(MANIFEST_NAME)
    try:
        with cache.open(store, MANIFEST_NAME, key=manifest_key(store.url, version, size), num_bytes=size) as path:
            data, st = _read_with_stat(path)
    except CacheError as exc:  # e.g. a cache limit below the manifest's size (K7)
        log.warning("%s: not kept in the node cache (%s); reading it from the store", where, exc)
        return None
    if len(data) == size and (sealed_by_self(st) or matches_etag(data, version, store.part_bytes)):
        record_latest(cache, store.url, version, size)  # for an open with the store unreachable (K47)
        return data
    log.warning("%s: the node cache's copy %s (owner uid %d, mode %o) is not known to hold the store's "
                "bytes (version %s); reading it from the store", where, path, st.st_uid, st.st_mode & 0o7777,
                version)
    return None


def _read_with_stat(path: str) -> tuple[bytes, os.stat_result]:
    """The bytes of the file at ``path`` and the ``fstat`` of the very file they were read from."""
    fd, _ = open_regular_file(path, "cached manifest")
    try:
        st = os.fstat(fd)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(), st
    except OSError as exc:
        raise StorageError(f"{path}: cannot read cached manifest: {exc.strerror}") from None
    finally:
        os.close(fd)


def _companion(store: Store, cache: ShardCache | None, json_data: bytes) -> Manifest | None:
    """The manifest from ``manifest.bin`` if it is there and re-encodes to ``json_data`` (M20):
    its bytes may come from anywhere (a shared cache entry), the proof is against the JSON."""
    where = store.url_of(COMPANION_NAME)
    json_checksum = xxh64_text(json_data)
    try:
        data = _cached_read(store, cache, COMPANION_NAME, f"manifest-bin-{json_checksum.split(':')[-1]}")
        manifest = decode_companion(data, json_checksum, where)
    except NotFoundError:
        log.info("%s: no manifest companion; parsing the (large) manifest.json", where)
        return None
    except ManifestError as exc:
        log.warning("%s is not used: %s", where, exc)
        return None
    if not describes_json(manifest, json_data):
        log.warning("%s is not used: it does not re-encode to the manifest.json it claims to describe "
                    "(M20: forged, or a JSON not written by shardkit); parsing the JSON", where)
        return None
    return manifest


def _cached_read(store: Store, cache: ShardCache | None, name: str, key: str) -> bytes:
    """``name``'s bytes through the node cache under ``key`` (straight from the store without
    a cache, for a local store, or when the cache cannot hold it)."""
    if not store.worth_caching or cache is None:
        return store.read(name)
    size = store.size(name)
    try:
        with cache.open(store, name, key=key, num_bytes=size) as path:
            return read_regular_file(path, "manifest companion")
    except CacheError as exc:
        log.warning("%s: not kept in the node cache (%s); reading it from the store", store.url_of(name), exc)
        return store.read(name)
