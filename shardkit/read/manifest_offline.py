"""The manifest when the store cannot be reached: from the node cache, if the job can trust it
(specs/cache.md K47, K48).

Offline there is no HEAD, hence no ETag to check a cached copy against (K44's first branch):
the copy is used only when this user sealed it (K46: written from the store by this user's
download, read-only since), unless the caller opted in to trusting the cache dir
(``offline="trust-cache"``). To find the entry without the (url, ETag, size) of its key, each
open that uses a trusted copy leaves a *pointer* ``v1/latest-<euid>-<sha256(url)>.json``,
sealed by its writer like a download: the url, version and size of the last manifest this
user opened from that URL. The key is recomputed from the pointer's version and size and the
job's own URL, so a pointer cannot name another dataset's manifest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass

from shardkit.errors import StorageError, StorageTimeoutError, TransientStorageError
from shardkit.storage import ShardCache
from shardkit.storage.cache_files import create_new_with_mode, open_regular, sealed_by_self
from shardkit.storage.cache_layout import Entry, entry_name
from shardkit.storage.shared_reads import UntrustedFileError, loads_json

log = logging.getLogger(__name__)

#: ``offline=`` values: use a copy this user sealed (default), any copy in the cache dir
#: (its bytes are then only as trustworthy as every user who can write the dir), or never.
OFFLINE_MODES = ("sealed", "trust-cache", "never")
#: Store failures that mean "unreachable": worth trying the cache (not 403, not 404).
UNREACHABLE = (TransientStorageError, StorageTimeoutError)
_MAX_POINTER_BYTES = 4096


def manifest_key(url: str, version: str, size: int) -> str:
    """The cache key of one version of a dataset's manifest (K18)."""
    digest = hashlib.sha256(f"{url}\0{version}\0{size}".encode()).hexdigest()[:32]
    return f"manifest-{digest}"


@dataclass(frozen=True)
class OfflineCopy:
    data: bytes
    path: str


def pointer_path(cache: ShardCache, url: str) -> str:
    digest = hashlib.sha256(url.encode()).hexdigest()[:32]
    return os.path.join(cache.root, f"latest-{os.geteuid()}-{digest}.json")


def record_latest(cache: ShardCache, url: str, version: str, size: int) -> None:
    """Point this user's offline lookup for ``url`` at (version, size); best effort (K47)."""
    path = pointer_path(cache, url)
    tmp = f"{path}.tmp-{os.getpid()}"
    body = json.dumps({"url": url, "version": version, "size": size}).encode()
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = create_new_with_mode(tmp, 0o600)
        try:
            os.write(fd, body)
            os.fchmod(fd, 0o444)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except (OSError, StorageError) as exc:
        log.debug("%s: cannot record the latest manifest (%s); offline use will not find it", path, exc)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def offline_copy(cache: ShardCache, url: str, mode: str, failure: Exception) -> OfflineCopy:
    """The cached manifest of ``url`` the job may use with the store unreachable (``failure``),
    else ``failure`` re-raised as a ``TransientStorageError`` naming the cache and the opt-in."""
    pointer = pointer_path(cache, url)
    record, why = _read_trusted(pointer, mode, _MAX_POINTER_BYTES)
    if record is not None:
        fields = _pointer_fields(record, url)
        if fields is None:
            why = f"{pointer} is not a pointer shardkit writes"
        else:
            path = Entry(cache.root, entry_name(manifest_key(url, *fields))).data
            data, why = _read_trusted(path, mode, fields[1])
            if data is not None and len(data) == fields[1]:
                return OfflineCopy(data, path)
            if data is not None:
                why = f"{path} has {len(data)} bytes, the manifest had {fields[1]}"
    raise TransientStorageError(
        f"{url}: the store cannot be reached ({failure}) and the node cache {cache.cache_dir} has no "
        f"manifest this job can trust offline: {why}. Warm the cache as this user "
        f"(`shardkit cache warm {url}`) or, if every user who can write {cache.cache_dir} is trusted, "
        f"opt in with offline='trust-cache' ($SHARDKIT_OFFLINE=trust-cache)") from failure


def _read_trusted(path: str, mode: str, max_bytes: int) -> tuple[bytes | None, str]:
    """The bytes of the regular file at ``path`` (at most ``max_bytes``) if ``mode`` trusts it."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None, f"no {os.path.basename(path)} (never opened online with this cache, as this user)"
    except (OSError, StorageError) as exc:
        return None, f"{path}: {exc}"
    try:
        st = os.fstat(fd)
        if mode != "trust-cache" and not sealed_by_self(st):
            return None, (f"{path} (owner uid {st.st_uid}, mode {st.st_mode & 0o7777:o}) is not a read-only "
                          f"file of this user (uid {os.geteuid()}): others may have written it (K46)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(max_bytes + 1), ""
    except OSError as exc:
        return None, f"{path}: {exc.strerror}"
    finally:
        os.close(fd)


def _pointer_fields(data: bytes, url: str) -> tuple[str, int] | None:
    """(version, size) of a pointer for ``url``, parsed strictly (K40), else None."""
    try:
        record = loads_json(data, "a latest-manifest pointer")
    except UntrustedFileError:
        return None
    if not isinstance(record, dict) or set(record) != {"url", "version", "size"} or record["url"] != url:
        return None
    version, size = record["version"], record["size"]
    if not isinstance(version, str) or isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return None
    return version, size

