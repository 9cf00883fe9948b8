"""A store: the bytes of a dataset folder at any fsspec URL (local path, ``s3://`` …).

A ``Store`` knows nothing of shard layout. Names passed to it are relative to its root and use
``/``; callers validate them (``format.manifest``) before they get here.

Thread-safety: a ``Store`` may be shared by threads; it holds no per-call state.
Pickling: never pickled by shardkit; DataLoader workers rebuild it from ``(url, options)``.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
import uuid
from typing import Any

import fsspec

from shardkit.errors import NotFoundError, StorageError

_INSTALL_HINTS = {
    "s3": "pip install 'shardkit[s3]'  (s3fs)",
    "gs": "pip install gcsfs",
    "gcs": "pip install gcsfs",
    "az": "pip install adlfs",
    "abfs": "pip install adlfs",
}


def split_protocol(url: str) -> tuple[str, str]:
    """``"s3://b/ds"`` → ``("s3", "b/ds")``; a plain path → ``("file", abspath)``."""
    if "://" in url:
        protocol, _, rest = url.partition("://")
        if protocol == "file":
            return "file", os.path.abspath(rest)
        return protocol, rest.rstrip("/")
    return "file", os.path.abspath(url)


class Store:
    """Read and write objects under one root URL."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/") if "://" in url else url
        self.storage_options = dict(storage_options or {})
        self.protocol, self.root = split_protocol(url)
        try:
            self.fs = fsspec.filesystem(self.protocol, **self.storage_options)
        except ImportError as exc:
            hint = _INSTALL_HINTS.get(self.protocol, f"install the fsspec backend for {self.protocol}")
            raise StorageError(f"cannot open {url}: {exc}. Install hint: {hint}") from exc

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    def path(self, name: str) -> str:
        """The backend path of ``name`` (no protocol)."""
        return posixpath.join(self.root, name) if name else self.root

    def url_of(self, name: str) -> str:
        """The full URL of ``name``, for error messages and logs."""
        if self.is_local:
            return os.path.join(self.root, name)
        return f"{self.protocol}://{self.path(name)}"

    def local_path(self, name: str) -> str:
        """Filesystem path of ``name``; only for local stores."""
        if not self.is_local:
            raise StorageError(f"{self.url_of(name)} is not a local file")
        return os.path.join(self.root, name)

    # ---- reading -------------------------------------------------------------------------
    def read(self, name: str) -> bytes:
        return self._call(name, lambda p: self.fs.cat_file(p))

    def read_range(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; raises if the object is shorter than ``end``."""
        data = self._call(name, lambda p: self.fs.cat_file(p, start=start, end=end))
        if len(data) != end - start:
            raise StorageError(
                f"{self.url_of(name)}: short read at bytes [{start}, {end}): "
                f"expected {end - start} bytes, got {len(data)}"
            )
        return bytes(data)

    def read_suffix(self, name: str, length: int, size: int | None = None) -> tuple[bytes, int]:
        """The last ``length`` bytes (or the whole object if shorter) and the object size."""
        size = self.size(name) if size is None else size
        start = max(0, size - length)
        return self.read_range(name, start, size), size

    def size(self, name: str) -> int:
        return int(self._call(name, lambda p: self.fs.size(p)))

    def exists(self, name: str) -> bool:
        return bool(self.fs.exists(self.path(name)))

    def list(self, prefix: str = "") -> list[str]:
        """Names (relative to the root) of the objects under ``prefix``, sorted."""
        base = self.path(prefix)
        if not self.fs.exists(base):
            return []
        found = self.fs.find(base)
        root = self.root.rstrip("/") + "/"
        return sorted(p[len(root):] if p.startswith(root) else p for p in found)

    # ---- writing -------------------------------------------------------------------------
    def write_atomic(self, name: str, data: bytes) -> None:
        """Publish ``data`` under ``name`` all at once: readers see the old object or the new.

        Local: a temp file in the same folder, fsync, rename. Object stores: one PUT (or a
        multipart upload completed only at the end), which is atomic for readers already.
        """
        if self.is_local:
            target = self.local_path(name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(target))
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, target)
            except BaseException:
                _unlink_quietly(tmp)
                raise
            return
        self._call(name, lambda p: self.fs.pipe_file(p, data))

    def delete(self, name: str) -> None:
        path = self.path(name)
        if self.fs.exists(path):
            self.fs.rm(path)

    def temp_name(self, name: str) -> str:
        """A unique sibling name for staging ``name`` (never listed in a manifest)."""
        head, tail = posixpath.split(name)
        return posixpath.join(head, f".tmp-{uuid.uuid4().hex}-{tail}")

    # ---- helpers -------------------------------------------------------------------------
    def _call(self, name: str, fn: Any) -> Any:
        path = self.path(name)
        try:
            return fn(path)
        except FileNotFoundError as exc:
            raise NotFoundError(f"{self.url_of(name)}: not found") from exc
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(f"{self.url_of(name)}: {exc}") from exc


def open_store(url: str, storage_options: dict[str, Any] | None = None) -> Store:
    """The store rooted at ``url`` (a folder path or an fsspec URL)."""
    return Store(url, storage_options)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
