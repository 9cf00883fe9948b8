"""An S3 object written piece by piece and published whole: a streamed multipart upload.

``MultipartAtomicWrite`` is what ``S3Store.open_atomic`` returns for ``s3://``: pieces fill one
buffer of ``part_bytes``; each full buffer is uploaded as the next part at once, so a writer
holds at most one part (plus the one on the wire) whatever the object's size — as local
output streams to a temp file. ``commit`` uploads the rest as the last part and completes the
upload: only then does the object appear, whole (S3 publishes a multipart upload atomically).
An object that never filled a part is sent as one PUT at ``commit``. ``discard`` aborts the
upload: nothing is published, and the parts are deleted.

Every request (create, each part, complete, the PUT) goes through the store's ``call`` — the
``RetryPolicy`` with errors that name the URL — so a transient failure costs one part, never
the whole object. Re-sending a part under the same number replaces it, so a retry is safe.

Thread-safety: one writer thread; ``discard`` may follow a failure from any thread.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

#: ``call(fn)``: ``fn(path)`` with retries and error mapping (``Store._call`` bound to a name).
Call = Callable[[Callable[[str], Any]], Any]

#: S3 refuses parts below 5 MiB, except the last.
MIN_PART_BYTES = 5 * 1024 * 1024


class MultipartAtomicWrite:
    """Stream one object to ``fs`` (an s3fs filesystem) at ``path``, published at ``commit``."""

    def __init__(self, fs: Any, path: str, call: Call, part_bytes: int) -> None:
        if part_bytes < MIN_PART_BYTES:
            raise ValueError(f"part_bytes must be >= {MIN_PART_BYTES} (S3's minimum), got {part_bytes}")
        self.fs, self.path, self.part_bytes = fs, path, part_bytes
        self._call = call
        self._buffer = io.BytesIO()  # the part being filled; sent as it is (file-like, no copy)
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._done = False

    @property
    def num_parts(self) -> int:
        """Parts uploaded so far."""
        return len(self._parts)

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data``; every part it completes is uploaded before this returns."""
        if self._done:
            raise ValueError(f"{self.path}: write after commit or discard")
        view = memoryview(data).cast("B")
        try:
            while self._buffer.tell() + len(view) >= self.part_bytes:
                take = self.part_bytes - self._buffer.tell()
                self._buffer.write(view[:take])
                view = view[take:]
                self._upload_part()
            self._buffer.write(view)
        except BaseException:
            self.discard()
            raise

    def commit(self) -> None:
        """Upload what is left and publish the object whole; on failure nothing is published."""
        if self._done:
            raise ValueError(f"{self.path}: already committed or discarded")
        try:
            if self._upload_id is None:
                self._send("put_object", self._take())
                self.fs.invalidate_cache(self.path)
            else:
                if self._buffer.tell():
                    self._upload_part()
                self._complete()
            self._done = True
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Drop what was written: abort the upload (idempotent; nothing to do once committed)."""
        if self._done:
            return
        self._done = True
        self._buffer = io.BytesIO()
        if self._upload_id is None:
            return
        bucket, key = self._bucket_key()
        try:
            self.fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=self._upload_id)
        except Exception as exc:  # best effort: S3 lifecycle rules reap abandoned uploads
            logger.warning("could not abort the multipart upload of s3://%s: %s", self.path, exc)

    def _bucket_key(self) -> tuple[str, str]:
        bucket, key, _ = self.fs.split_path(self.path)
        return bucket, key

    def _take(self) -> io.BytesIO:
        body, self._buffer = self._buffer, io.BytesIO()
        return body

    def _send(self, method: str, body: io.BytesIO, **params: Any) -> Any:
        """One request carrying ``body``, retried whole (the body rewound for each attempt)."""
        bucket, key = self._bucket_key()

        def once(_: str) -> Any:
            body.seek(0)
            return self.fs.call_s3(method, Bucket=bucket, Key=key, Body=body, **params)

        return self._call(once)

    def _upload_part(self) -> None:
        if self._upload_id is None:
            bucket, key = self._bucket_key()
            created = self._call(lambda _: self.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key))
            self._upload_id = str(created["UploadId"])
        number = len(self._parts) + 1
        sent = self._send("upload_part", self._take(), UploadId=self._upload_id, PartNumber=number)
        self._parts.append({"PartNumber": number, "ETag": sent["ETag"]})

    def _complete(self) -> None:
        bucket, key = self._bucket_key()
        self._call(lambda _: self.fs.call_s3(
            "complete_multipart_upload", Bucket=bucket, Key=key, UploadId=self._upload_id,
            MultipartUpload={"Parts": list(self._parts)}))
        self.fs.invalidate_cache(self.path)
