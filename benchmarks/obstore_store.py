"""A ``Store`` whose reads go through obstore (Rust ``object_store``) instead of s3fs — for the
client comparison in benchmarks/downloads.py only; shardkit itself keeps s3fs (benchmarks/S3.md).

``ObstoreStore(url, endpoint_url)`` serves the reads the cache and the reader make
(``read``, ``read_range``, ``size``, ``exists``) with obstore, behind the same interface,
errors and ``RetryPolicy`` as ``Store``: obstore's own retries are turned off and its errors
are mapped by ``storage/classify.py`` (a 503 is a ``ThrottledError``, as with s3fs).
Anonymous, path-style, plain HTTP: what the benchmark's local endpoints need.

Fork: the client is built per process, like ``Store.fs`` (K17) — a forked child that finds
one made by its parent makes its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from shardkit.errors import TransientStorageError
from shardkit.storage import Store
from shardkit.storage.retry import RetryPolicy
from shardkit.storage.store import split_protocol

T = TypeVar("T")


class ObstoreStore(Store):
    """Reads of ``s3://bucket/prefix`` at ``endpoint_url`` through obstore."""

    def __init__(self, url: str, endpoint_url: str, retry: RetryPolicy | None = None) -> None:
        # Not Store.__init__: that builds an s3fs filesystem, and this store must not need s3fs.
        self.url, self.storage_options, self.retry = url.rstrip("/"), {}, retry or RetryPolicy()
        self.protocol, self.root = split_protocol(url)
        self._fs, self._fs_pid, self.part_bytes = None, os.getpid(), 0
        self.endpoint_url = endpoint_url
        self.direct_ranges, self._direct = False, None  # every body through obstore
        self._client: Any = None
        self._client_pid = -1

    @property
    def client(self) -> Any:
        if self._client_pid != os.getpid():
            from obstore.store import S3Store

            bucket = self.root.split("/", 1)[0]
            self._client = S3Store(
                bucket,
                endpoint=self.endpoint_url,
                region="us-east-1",
                skip_signature=True,
                virtual_hosted_style_request=False,
                client_options={
                    "allow_http": True,
                    "connect_timeout": timedelta(seconds=self.retry.connect_timeout),
                    "timeout": timedelta(seconds=self.retry.read_timeout),
                },
                retry_config={"max_retries": 0},  # RetryPolicy is the one retry layer
            )
            self._client_pid = os.getpid()
        return self._client

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_client"], state["_client_pid"] = None, -1
        return state

    def read(self, name: str) -> bytes:
        import obstore

        return self._obstore_call(name, lambda key: bytes(obstore.get(self.client, key).bytes()))

    def read_range(self, name: str, start: int, end: int, *, retry: RetryPolicy | None = None) -> bytes:
        import obstore

        if end == start:
            return b""

        def once(key: str) -> bytes:
            data = bytes(obstore.get_range(self.client, key, start=start, end=end))
            if len(data) != end - start:
                raise TransientStorageError(f"{self.url_of(name)}: short read at bytes [{start}, {end})")
            return data

        return self._obstore_call(name, once, retry)

    def size(self, name: str) -> int:
        import obstore

        return self._obstore_call(name, lambda key: int(obstore.head(self.client, key)["size"]))

    def exists(self, name: str) -> bool:
        try:
            self.size(name)
        except FileNotFoundError:
            return False
        return True

    def _obstore_call(self, name: str, fn: Callable[[str], T], retry: RetryPolicy | None = None) -> T:
        """``fn(key)`` through ``Store._call``: the same retries and error mapping as s3fs gets."""
        return self._call(name, lambda path: fn(path.split("/", 1)[1]), retry)
