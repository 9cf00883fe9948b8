"""Which backend serves a URL, chosen once, when the store is made (specs/store.md).

A plain path or ``file://`` → ``LocalStore``; ``s3://`` / ``s3a://`` → ``DirectS3Store``
(range bodies over direct HTTP, K23) or, with ``direct_ranges=False``, ``S3Store`` (every byte
through s3fs); any other protocol → ``FsspecStore`` (a missing fsspec backend is a
``StorageError`` with an install hint: backends.py). ``MemoryStore`` has no URL: make it directly.
"""

from __future__ import annotations

import os
from typing import Any

from shardkit.storage.fsspec_store import FsspecStore
from shardkit.storage.local_store import LocalStore
from shardkit.storage.retry import RetryPolicy
from shardkit.storage.s3_store import DirectS3Store, S3Store
from shardkit.storage.store import Store

_S3 = ("s3", "s3a")


def split_protocol(url: str) -> tuple[str, str]:
    """``"s3://b/ds"`` → ``("s3", "b/ds")``; a plain path → ``("file", abspath)``."""
    if "://" in url:
        protocol, _, rest = url.partition("://")
        if protocol == "file":
            return "file", os.path.abspath(rest)
        return protocol, rest.rstrip("/")
    return "file", os.path.abspath(url)


def open_store(url: str, storage_options: dict[str, Any] | None = None,
               retry: RetryPolicy | None = None, *, direct_ranges: bool = True) -> Store:
    """The store rooted at ``url`` (a folder path or an fsspec URL). ``direct_ranges``: S3 range
    bodies over plain HTTP connections (K23); False: through s3fs, as every other request."""
    protocol, _ = split_protocol(url)
    if protocol == "file":
        return LocalStore(url, storage_options, retry)
    if protocol in _S3:
        backend = DirectS3Store if direct_ranges else S3Store
        return backend(url, storage_options, retry)
    return FsspecStore(url, storage_options, retry)
