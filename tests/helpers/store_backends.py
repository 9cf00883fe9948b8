"""Every store backend, made ready for the contract suite (specs/store.md, ST1–ST11).

``open_backend(kind, …)`` yields a ``Backend``: the store under test, ``seed(name, data)`` that
publishes an object by a side door (the folder of a read-only server, or a second store with no
faults in between), and whether the store itself may write. The kinds:

- ``local``: ``LocalStore`` over a temp folder.
- ``memory``: ``MemoryStore``.
- ``fsspec-memory``: ``FsspecStore`` over fsspec's ``memory://``.
- ``moto-s3fs``: ``S3Store`` (every byte through s3fs) against moto.
- ``moto-direct``: ``DirectS3Store`` (range bodies over direct HTTP) against moto.
- ``keepalive``: ``DirectS3Store`` against the read-only keep-alive S3 server
  (tests/helpers/keepalive_s3.py: persistent connections, as nginx or S3 keep them).
- ``fault-proxy``: ``DirectS3Store`` through the fault proxy in front of moto, which answers
  seeded GETs with a 503 or a truncated body; the store's retries must hide every one.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from shardkit.storage import MemoryStore, RetryPolicy, Store, open_store

KINDS = ("local", "memory", "fsspec-memory", "moto-s3fs", "moto-direct", "keepalive", "fault-proxy")
NETWORK_KINDS = frozenset({"moto-s3fs", "moto-direct", "keepalive", "fault-proxy"})
#: Quick retries: a short read past the end is raised within milliseconds, and the fault
#: proxy's injected failures are retried until they pass.
QUICK = RetryPolicy(max_attempts=12, base_delay=0.001, max_delay=0.01, timeout=60.0,
                    connect_timeout=5.0, read_timeout=20.0)


@dataclass
class Backend:
    kind: str
    store: Store
    seed: Callable[[str, bytes], None]
    writable: bool
    #: GETs the server saw so far (None where nobody counts): to check coalescing on the wire.
    num_gets: Callable[[], int] | None = None
    #: Faults the proxy injected so far (None where none are): the suite checks some fired.
    num_faults: Callable[[], int] | None = None


def _write_file(root: Path) -> Callable[[str, bytes], None]:
    def seed(name: str, data: bytes) -> None:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".seed-{uuid.uuid4().hex}")
        staged.write_bytes(data)
        os.replace(staged, path)  # a new inode: as a republish

    return seed


@contextlib.contextmanager
def open_backend(kind: str, tmp: Path, s3_endpoint: str | None) -> Iterator[Backend]:
    """The backend ``kind`` (``s3_endpoint``: the moto server, for the S3 kinds)."""
    if kind == "local":
        store = open_store(str(tmp / "ds"), retry=QUICK)
        yield Backend(kind, store, store.write_atomic, True)
    elif kind == "memory":
        memory = MemoryStore(retry=QUICK)
        yield Backend(kind, memory, memory.write_atomic, True)
    elif kind == "fsspec-memory":
        store = open_store(f"memory://contract-{uuid.uuid4().hex}", retry=QUICK)
        yield Backend(kind, store, store.write_atomic, True)
    elif kind == "keepalive":
        from tests.helpers.keepalive_s3 import KeepAliveS3Server

        (tmp / "bucket" / "ds").mkdir(parents=True)
        with KeepAliveS3Server(str(tmp)) as server:
            store = open_store("s3://bucket/ds", server.storage_options(), retry=QUICK)
            yield Backend(kind, store, _write_file(tmp / "bucket" / "ds"), False,
                          lambda: sum(r.method == "GET" for r in server.records()))
    else:
        if s3_endpoint is None:
            raise ValueError(f"backend {kind!r} needs the moto server")
        yield from _s3_backend(kind, s3_endpoint)


def _s3_backend(kind: str, endpoint: str) -> Iterator[Backend]:
    from tests.helpers.fault_proxy import Fault, FaultProxy
    from tests.helpers.s3 import create_bucket, storage_options

    url = f"s3://{create_bucket(endpoint)}/ds"
    plain = open_store(url, storage_options(endpoint), retry=QUICK)
    if kind != "fault-proxy":
        store = open_store(url, storage_options(endpoint), retry=QUICK, direct_ranges=kind == "moto-direct")
        yield Backend(kind, store, plain.write_atomic, True)
        return
    proxy = FaultProxy(endpoint).start()
    try:
        proxy.add(Fault("status", rate=0.15, status=503, key="/ds/"))  # objects, not listings
        proxy.add(Fault("truncate", rate=0.1, key="/ds/"))
        store = open_store(url, storage_options(proxy.endpoint_url), retry=QUICK)
        yield Backend(kind, store, plain.write_atomic, True,
                      num_faults=lambda: sum(r.fault is not None for r in proxy.records(None)))
    finally:
        proxy.stop()
