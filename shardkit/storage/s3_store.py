"""The S3 backends: ``S3Store`` (every request through s3fs) and ``DirectS3Store`` (bodies of
range reads over plain keep-alive HTTP connections, K23). ``open_store`` picks one, once.

Both bound every s3fs request by the policy's deadline (K25), read a whole object in one
request (s3fs would otherwise ask for its size first, to split large objects: a second round
trip on every manifest open), and write through ``MultipartAtomicWrite``: one PUT, or from
``part_bytes`` a multipart upload completed only at the end, each part retried on its own.

``DirectS3Store`` streams range bodies with http_ranges.py over URLs presigned by s3fs's own
client, spliced to the caller's ``put`` when it takes pipes (body_splice.py). A store whose
requests need more than a presigned GET — requester-pays, extra request arguments, version
awareness, or a proxy in front of the endpoint — reads its bodies through s3fs instead, as
``S3Store`` does; that is decided once per process, on first use.
"""

from __future__ import annotations

from typing import Any

from fsspec.exceptions import FSTimeoutError

from shardkit.errors import TransientStorageError
from shardkit.storage.body_splice import Put
from shardkit.storage.fsspec_store import FsspecStore
from shardkit.storage.http_ranges import Write, proxy_applies, stream_range
from shardkit.storage.multipart import MultipartAtomicWrite
from shardkit.storage.ranges import check_range
from shardkit.storage.retry import RetryPolicy
from shardkit.storage.store import AtomicWrite


class S3Store(FsspecStore):
    """Objects under ``s3://bucket/prefix``, every request through s3fs."""

    def _request_options(self) -> dict[str, Any]:
        return {"timeout": self.retry.timeout}  # fsspec cancels the request past it (K25)

    def read(self, name: str) -> bytes:
        options = {"max_concurrency": 1, **self._request_options()}
        return bytes(self._call(name, lambda p: self.fs.cat_file(p, **options)))

    def _cat_range(self, name: str, path: str, start: int, end: int) -> bytes:
        try:
            return super()._cat_range(name, path, start, end)
        except FSTimeoutError as exc:
            raise TransientStorageError(f"{self.url_of(name)}: bytes [{start}, {end}) not read by the "
                                        f"request's deadline, {self.retry.timeout:g}s (K25)") from exc

    def write_atomic(self, name: str, data: bytes) -> None:
        file = self.open_atomic(name)
        file.write(data)
        file.commit()

    def open_atomic(self, name: str) -> AtomicWrite:
        """A multipart upload streamed part by part (memory: one part of ``part_bytes``)."""
        return MultipartAtomicWrite(self.fs, self._path(name), lambda fn: self._call(name, fn),
                                    self.part_bytes)


class DirectS3Store(S3Store):
    """``S3Store`` whose range bodies travel over plain HTTP connections (K23)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None) -> None:
        super().__init__(url, storage_options, retry)
        self._direct: bool | None = None  # decided on first use, per process

    def _after_fork(self) -> None:
        self._direct = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_direct"] = None
        return state

    def stream_range(self, name: str, start: int, end: int, write: Write, *,
                     retry: RetryPolicy | None = None, put: Put | None = None) -> None:
        """As ``Store.stream_range``; most of a plain-HTTP body is spliced to ``put(pipe_fd,
        count, offset)`` when given (it must take exactly ``count`` bytes out of the pipe).
        Each request ends within ``self.retry.timeout`` (K25)."""
        check_range(self.url_of(name), start, end)
        if end == start:
            return
        if not self._direct_ok(name):
            super().stream_range(name, start, end, write, retry=retry, put=put)
            return
        verify = (self.storage_options.get("client_kwargs") or {}).get("verify", True)
        policy = self.retry

        def once(path: str) -> None:
            stream_range(self.fs.url(path), start, end, write, verify=verify, put=put, total_timeout=policy.timeout,
                         connect_timeout=policy.connect_timeout, read_timeout=policy.read_timeout)

        self._call(name, once, retry)

    def _direct_ok(self, name: str) -> bool:
        """Whether this process's reads of ``name`` may skip s3fs for the bytes (K23)."""
        fs = self.fs  # first: a forked child resets ``_direct``
        if self._direct is None:
            special = (getattr(fs, "requester_pays", False) or getattr(fs, "s3_additional_kwargs", None)
                       or getattr(fs, "version_aware", False))
            proxies = (self.storage_options.get("config_kwargs") or {}).get("proxies")
            self._direct = not special and not proxy_applies(
                self._call(name, lambda p: str(fs.url(p))), proxies)
        return self._direct
