"""ST11: ``open_store`` picks one backend per URL when the store is made; ``Store`` is abstract."""

from __future__ import annotations

import os

import pytest

from shardkit.errors import StorageError
from shardkit.storage import MemoryStore, Store, open_store
from shardkit.storage.fsspec_store import FsspecStore
from shardkit.storage.local_store import LocalStore


@pytest.mark.parametrize("url", ["ds", "./ds/", "file://ds"])
def test_a_path_or_file_url_is_a_local_store_rooted_at_its_absolute_path_st11(url: str, tmp_path: object) -> None:
    store = open_store(url)
    assert type(store) is LocalStore
    assert store.local_path("a/b.bin") == os.path.join(os.path.abspath("ds"), "a/b.bin")
    assert store.url_of("x") == os.path.join(os.path.abspath("ds"), "x")


def test_other_protocols_are_fsspec_stores_st11() -> None:
    store = open_store("memory://st11-other/ds/")
    assert type(store) is FsspecStore and store.url_of("x.bin") == "memory://st11-other/ds/x.bin"
    assert store.local_path("x.bin") is None and store.worth_caching


def test_s3_urls_read_bodies_directly_unless_told_not_to_st11() -> None:
    pytest.importorskip("s3fs", reason="needs s3fs")
    from shardkit.storage.s3_store import DirectS3Store, S3Store

    options = {"anon": True}
    assert type(open_store("s3://bucket/ds", options)) is DirectS3Store
    assert type(open_store("s3a://bucket/ds", options, direct_ranges=False)) is S3Store
    assert open_store("s3://bucket/ds/", options).url_of("m.json") == "s3://bucket/ds/m.json"


def test_an_unknown_protocol_names_the_url_st11() -> None:
    with pytest.raises(StorageError, match="nope://x"):
        open_store("nope://x/ds")


def test_the_protocol_itself_cannot_be_made_and_memory_stores_need_no_url_st11() -> None:
    with pytest.raises(TypeError, match="abstract"):
        Store("x")  # type: ignore[abstract]
    first, second = MemoryStore(), MemoryStore()
    assert first.url != second.url  # two stores, two namespaces
    first.write_atomic("a", b"1")
    assert not second.exists("a")
