"""Fetch a whole object into an already-allocated local file, in ranged chunks.

Chunks are separate range requests, each retried by the store's ``RetryPolicy``: a transient
failure costs one chunk, not the whole shard, and memory stays bounded by
``chunk_bytes × num_threads``. ``cancel`` (a ``threading.Event``) stops between chunks.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from shardkit.errors import CacheError, StorageError
from shardkit.storage.cache_files import open_regular, sole_link
from shardkit.storage.store import Store


class DownloadCancelled(StorageError):
    """A download stopped because its prefetch was cancelled."""


def download_to(store: Store, name: str, path: str, num_bytes: int, *, chunk_bytes: int,
                num_threads: int, cancel: threading.Event | None = None) -> None:
    """Write bytes ``[0, num_bytes)`` of ``name`` into the file at ``path`` (opened r+)."""
    chunks = [(s, min(s + chunk_bytes, num_bytes)) for s in range(0, num_bytes, chunk_bytes)]
    stop = cancel or threading.Event()
    fd = open_regular(path, os.O_WRONLY)  # never through a link planted in our place (K13)
    try:
        if not sole_link(fd):
            raise CacheError(f"{path} has another name (a hard link); refusing to write into it")
        if len(chunks) <= 1 or num_threads <= 1:
            for start, end in chunks:
                _fetch_chunk(store, name, fd, start, end, stop)
            return
        local_stop = threading.Event()

        def task(start: int, end: int) -> None:
            if local_stop.is_set():
                return
            _fetch_chunk(store, name, fd, start, end, stop)

        with ThreadPoolExecutor(max_workers=num_threads,
                                thread_name_prefix="shardkit-download") as pool:
            futures = [pool.submit(task, s, e) for s, e in chunks]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in done if f.exception() is not None]
            if failed:
                local_stop.set()
                for future in futures:
                    future.cancel()
                raise failed[0].exception()  # type: ignore[misc]
    finally:
        os.close(fd)


def _fetch_chunk(store: Store, name: str, fd: int, start: int, end: int,
                 cancel: threading.Event) -> None:
    if cancel.is_set():
        raise DownloadCancelled(f"{store.url_of(name)}: download cancelled")
    data = memoryview(store.read_range(name, start, end))
    offset = start
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written
