"""The store protocol: what shardkit asks of the place a dataset folder lives (specs/store.md).

A ``Store`` knows nothing of shard layout. Names passed to it are relative to its root and use
``/``; callers validate them (``format.manifest``) before they get here. The backends
(``open_store`` picks one per URL, once: registry.py) are local files (local_store.py), a
dict in memory (memory_store.py), any fsspec filesystem (fsspec_store.py), and S3 with bodies
through s3fs or over direct HTTP connections (s3_store.py). Every one passes the same
contract suite (tests/integration/storage/test_store_contract.py).

Errors: every failure is a ``StorageError`` naming the URL (``NotFoundError`` for a missing
object, ``TransientStorageError`` for what is worth retrying, ST6). Reads are retried per
``retry``. Thread-safety: a ``Store`` may be shared by threads; it holds no per-call state
(ST9). Processes: a store that crossed a ``fork`` or was pickled to a spawned process makes
its own connections there (K17), so stores may be shared with DataLoader workers as they are.
"""

from __future__ import annotations

import posixpath
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from shardkit.errors import NotFoundError, StorageError
from shardkit.storage.atomic import BufferedAtomicWrite, LocalAtomicWrite
from shardkit.storage.body_splice import Put
from shardkit.storage.classify import to_storage_error
from shardkit.storage.http_ranges import Write
from shardkit.storage.multipart import MultipartAtomicWrite
from shardkit.storage.ranges import RangeOptions, check_range, fetch_ranges
from shardkit.storage.retry import RetryPolicy, call_with_retry

T = TypeVar("T")

#: What ``Store.open_atomic`` returns: ``write`` pieces, then ``commit`` or ``discard``.
AtomicWrite = LocalAtomicWrite | MultipartAtomicWrite | BufferedAtomicWrite

#: Bytes per part of an S3 upload (``Store.part_bytes``); an object that fills a part is sent
#: as a multipart upload, a smaller one as one PUT (multipart.py).
MULTIPART_PART_BYTES = 16 * 1024 * 1024
MULTIPART_THRESHOLD = MULTIPART_PART_BYTES


class ObjectStat(NamedTuple):
    """What one metadata request says of an object: its ``size`` in bytes and ``etag``, a
    token that changes when the object is replaced (S3: the ETag; GCS: the generation; local
    files: inode, size and modification time; memory: a counter), ST5."""

    size: int
    etag: str


class Store(ABC):
    """Read and write objects under one root URL; the contract is specs/store.md (ST1–ST10).

    Subclasses implement the abstract methods; the rest (``read_ranges``, ``read_suffix``,
    ``size``, ``exists``, ``stream_range``, ``temp_name``) is built on them, once, here.
    """

    #: Whether a node-local copy of an object saves reads (False for local files: K8, the
    #: cache never copies or evicts local data).
    worth_caching = True
    #: How ``read_ranges`` plans requests on this backend (ST4).
    range_options = RangeOptions()

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None) -> None:
        self.url = url.rstrip("/") if "://" in url else url
        self.storage_options = dict(storage_options or {})
        self.retry = retry or RetryPolicy()
        #: The writer's part size for uploads in parts (S3), tried first when an ETag is checked.
        self.part_bytes = MULTIPART_PART_BYTES

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def url_of(self, name: str) -> str:
        """The full URL of ``name``, for error messages and logs."""
        return f"{self.url}/{name}" if name else self.url

    def local_path(self, name: str) -> str | None:
        """A filesystem path that holds ``name``'s bytes, for ``pread``/``mmap`` (ST10); None
        where the objects are not local files."""
        return None

    # ---- reading -------------------------------------------------------------------------
    @abstractmethod
    def read(self, name: str) -> bytes:
        """The whole object (ST1). Large objects are read by ranges or downloaded in chunks
        (download.py), not with this."""

    def read_range(self, name: str, start: int, end: int, *,
                   retry: RetryPolicy | None = None) -> bytes:
        """Bytes ``[start, end)`` exactly (ST2): ``ValueError`` for a negative or reversed
        range, ``b""`` for an empty one, and never fewer bytes than asked — a short body is
        retried, then raised naming the URL and range (ST3). ``retry`` replaces the store's
        policy for this call (cache downloads retry each part themselves: download.py)."""
        check_range(self.url_of(name), start, end)
        if end == start:
            return b""
        return self._read_range(name, start, end, retry)

    @abstractmethod
    def _read_range(self, name: str, start: int, end: int, retry: RetryPolicy | None) -> bytes:
        """``read_range`` of a valid non-empty range."""

    def stream_range(self, name: str, start: int, end: int, write: Write, *,
                     retry: RetryPolicy | None = None, put: Put | None = None) -> None:
        """Bytes ``[start, end)`` handed to ``write(piece, offset)`` in order as they arrive
        (``piece`` valid only during the call); errors and retries as ``read_range``, and an
        exception from ``write`` ends the read. Every attempt starts over at ``start``: a failed
        one may have written a prefix. ``put(pipe_fd, count, offset)``, when given, may be
        handed pipe-held pieces instead (s3_store.py); here it is one ``read_range``."""
        check_range(self.url_of(name), start, end)
        if end > start:
            write(memoryview(self.read_range(name, start, end, retry=retry)), start)

    def read_ranges(self, name: str, ranges: Sequence[tuple[int, int]], *,
                    retry: RetryPolicy | None = None) -> list[bytes]:
        """The bytes of each ``(start, end)`` of ``ranges``, in the order given (ST4). The store
        owns the plan: nearby ranges are read by one request, requests run concurrently up to
        ``range_options.max_in_flight``, overlapping and repeated ranges are read once."""
        where = self.url_of(name)
        for start, end in ranges:
            check_range(where, start, end)

        def fetch(start: int, end: int) -> bytearray:
            out = bytearray(end - start)

            def write(piece: memoryview, offset: int) -> None:
                out[offset - start:offset - start + len(piece)] = piece

            self.stream_range(name, start, end, write, retry=retry)
            return out

        return fetch_ranges(ranges, fetch, self.range_options)

    def read_suffix(self, name: str, length: int, size: int | None = None) -> tuple[bytes, int]:
        """The last ``length`` bytes (or the whole object if shorter) and the object size."""
        size = self.size(name) if size is None else size
        return self.read_range(name, max(0, size - length), size), size

    @abstractmethod
    def stat(self, name: str) -> ObjectStat:
        """``(size, etag)`` of ``name`` as it is now, from one metadata request (ST5)."""

    def size(self, name: str) -> int:
        return self.stat(name).size

    def exists(self, name: str) -> bool:
        try:
            self.stat(name)
        except NotFoundError:
            return False
        return True

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Names (relative to the root) of the objects under ``prefix``, sorted (ST7)."""

    # ---- writing -------------------------------------------------------------------------
    @abstractmethod
    def write_atomic(self, name: str, data: bytes) -> None:
        """Publish ``data`` under ``name`` all at once: readers see the old object or the new (ST8)."""

    @abstractmethod
    def open_atomic(self, name: str) -> AtomicWrite:
        """Write ``name`` piece by piece, then ``commit()`` publishes it whole, as
        ``write_atomic`` would (``discard()`` leaves nothing), ST8."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove ``name``; a missing one is no error."""

    @abstractmethod
    def copy(self, src: str, dst: str) -> None:
        """Publish a copy of ``src`` at ``dst``, atomically for readers; ``src`` stays."""

    def temp_name(self, name: str) -> str:
        """A unique sibling name for staging ``name`` (never listed in a manifest)."""
        head, tail = posixpath.split(name)
        return posixpath.join(head, f".tmp-{uuid.uuid4().hex}-{tail}")

    # ---- helpers -------------------------------------------------------------------------
    def _path(self, name: str) -> str:
        """What ``_call`` hands its function for ``name`` (the backend's own path or key)."""
        return name

    def _call(self, name: str, fn: Callable[[str], T], retry: RetryPolicy | None = None) -> T:
        """``fn(path)`` with errors mapped to the shardkit tree and transient ones retried."""
        path, url = self._path(name), self.url_of(name)

        def once() -> T:
            try:
                return fn(path)
            except StorageError:
                raise
            except Exception as exc:  # backends raise anything; classify names the URL
                raise to_storage_error(exc, url) from exc

        return call_with_retry(once, policy=retry or self.retry, what=url)
