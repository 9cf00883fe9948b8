"""K17: a forked child never uses, closes or disturbs its parent's object-store connections.

Against the keep-alive S3 server (tests/helpers/keepalive_s3.py), which keeps every connection
open as real object stores do and tags each request with the TCP connection it arrived on.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
from collections.abc import Iterator
from typing import Any

import pytest

from shardkit.storage import Store, open_store
from tests.helpers.keepalive_s3 import KeepAliveS3Server, call_within

pytestmark = pytest.mark.s3
OBJECT = "bucket/ds/blob.bin"
PAYLOAD = bytes(range(256)) * 64


@pytest.fixture
def server(tmp_path: Any) -> Iterator[KeepAliveS3Server]:
    pytest.importorskip("s3fs", reason="needs s3fs")
    (tmp_path / "bucket" / "ds").mkdir(parents=True)
    (tmp_path / "bucket" / "ds" / "blob.bin").write_bytes(PAYLOAD)
    with KeepAliveS3Server(str(tmp_path)) as running:
        yield running


def _drop_and_collect_in_a_loop(holder: list[Store], url: str, options: dict[str, Any]) -> None:
    """The child: read through the inherited store and a new one, then drop the inherited store
    and garbage-collect from inside a running event loop — where a DataLoader worker's own I/O
    thread often collects what it inherited."""
    if holder[0].read("blob.bin") != PAYLOAD or open_store(url, options).read("blob.bin") != PAYLOAD:
        os._exit(3)

    async def collect() -> None:
        holder.clear()
        gc.collect()
        await asyncio.sleep(0.3)  # lets anything the collection scheduled on this loop run

    asyncio.run(collect())
    os._exit(0)


def test_forked_child_neither_reuses_nor_breaks_the_parents_pooled_connections(
        server: KeepAliveS3Server) -> None:
    """K17: the child's requests arrive on connections of its own; after the child dropped and
    collected the store it inherited, the parent's next request reuses its pooled connection
    and returns at once."""
    url, options = "s3://bucket/ds", server.storage_options()
    holder = [open_store(url, options)]  # the only reference: the child can drop the store
    assert holder[0].read("blob.bin") == PAYLOAD
    parents = {r.connection_id for r in server.records()}
    child = multiprocessing.get_context("fork").Process(
        target=_drop_and_collect_in_a_loop, args=(holder, url, options))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    childs = {r.connection_id for r in server.records()} - parents
    assert childs and not childs & parents  # two child reads, none on a parent's connection
    before = len(server.records())
    assert call_within(10, lambda: holder[0].read("blob.bin")) == PAYLOAD
    assert {r.connection_id for r in server.records()[before:]} <= parents


def _read_and_exit(store: Store) -> None:
    os._exit(0 if store.read("blob.bin") == PAYLOAD else 3)


def test_spawned_child_builds_its_own_connections(server: KeepAliveS3Server) -> None:
    """K17: a store sent to a spawned process reads there over connections of its own."""
    store = open_store("s3://bucket/ds", server.storage_options())
    assert store.read("blob.bin") == PAYLOAD
    parents = {r.connection_id for r in server.records()}
    child = multiprocessing.get_context("spawn").Process(target=_read_and_exit, args=(store,))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    assert {r.connection_id for r in server.records()} - parents
    assert call_within(10, lambda: store.read("blob.bin")) == PAYLOAD
