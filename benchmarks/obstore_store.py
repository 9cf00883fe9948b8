"""A ``Store`` whose reads go through obstore (Rust ``object_store``) instead of s3fs — for the
client comparison in benchmarks/downloads.py only; shardkit itself keeps s3fs (benchmarks/S3.md).

``ObstoreStore(url, endpoint_url)`` serves the reads the cache and the reader make
(``read``, ``read_range``, ``stat``) with obstore, behind the ``Store`` protocol
(specs/store.md) with the same errors and ``RetryPolicy``; it writes nothing. obstore's own
retries are turned off and its errors are mapped by ``storage/classify.py`` (a 503 is a
``ThrottledError``, as with s3fs).
Anonymous, path-style, plain HTTP: what the benchmark's local endpoints need.

Fork: the client is built per process, like ``FsspecStore.fs`` (K17) — a forked child that finds
one made by its parent makes its own.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from shardkit.errors import TransientStorageError
from shardkit.storage import ObjectStat, Store, split_protocol
from shardkit.storage.retry import RetryPolicy
from shardkit.storage.store import AtomicWrite

T = TypeVar("T")


class ObstoreStore(Store):
    """Reads of ``s3://bucket/prefix`` at ``endpoint_url`` through obstore."""

    def __init__(self, url: str, endpoint_url: str, retry: RetryPolicy | None = None) -> None:
        super().__init__(url, None, retry)
        self.root = split_protocol(url)[1]
        self.endpoint_url = endpoint_url
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
        state = self.__dict__.copy()
        state["_client"], state["_client_pid"] = None, -1
        return state

    def read(self, name: str) -> bytes:
        import obstore

        return self._obstore_call(name, lambda key: bytes(obstore.get(self.client, key).bytes()))

    def _read_range(self, name: str, start: int, end: int, retry: RetryPolicy | None) -> bytes:
        import obstore

        def once(key: str) -> bytes:
            data = bytes(obstore.get_range(self.client, key, start=start, end=end))
            if len(data) != end - start:
                raise TransientStorageError(f"{self.url_of(name)}: short read at bytes [{start}, {end})")
            return data

        return self._obstore_call(name, once, retry)

    def stat(self, name: str) -> ObjectStat:
        import obstore

        def once(key: str) -> ObjectStat:
            meta = obstore.head(self.client, key)
            return ObjectStat(int(meta["size"]), str(meta.get("e_tag") or ""))

        return self._obstore_call(name, once)

    def list(self, prefix: str = "") -> list[str]:
        raise NotImplementedError("ObstoreStore serves the benchmark's reads only")

    def write_atomic(self, name: str, data: bytes) -> None:
        raise NotImplementedError("ObstoreStore serves the benchmark's reads only")

    def open_atomic(self, name: str) -> AtomicWrite:
        raise NotImplementedError("ObstoreStore serves the benchmark's reads only")

    def delete(self, name: str) -> None:
        raise NotImplementedError("ObstoreStore serves the benchmark's reads only")

    def copy(self, src: str, dst: str) -> None:
        raise NotImplementedError("ObstoreStore serves the benchmark's reads only")

    def _path(self, name: str) -> str:
        return posixpath.join(self.root, name)

    def _obstore_call(self, name: str, fn: Callable[[str], T], retry: RetryPolicy | None = None) -> T:
        """``fn(key)`` through ``Store._call``: the same retries and error mapping as s3fs gets."""
        # ``_path`` is ``bucket/key``: obstore's client is for the bucket, so it takes the key.
        return self._call(name, lambda path: fn(path.split("/", 1)[1]), retry)
