"""``Store.open_atomic`` (storage/atomic.py; specs/shard-format.md W2): an object written piece
by piece appears whole at ``commit`` and not before; a failed or discarded write leaves nothing."""

from __future__ import annotations

import os

import pytest

from shardkit.storage import open_store


def test_pieces_appear_whole_at_commit_and_not_before(tmp_path) -> None:
    store = open_store(str(tmp_path))
    file = store.open_atomic("shards/a.sks")
    for piece in (b"head", b"x" * 100_000, b"tail"):
        file.write(piece)
        assert not store.exists("shards/a.sks")  # a reader sees nothing until the commit
    file.commit()
    assert store.read("shards/a.sks") == b"head" + b"x" * 100_000 + b"tail"
    assert os.listdir(tmp_path / "shards") == ["a.sks"]  # no temp file left


def test_commit_replaces_an_existing_object_whole(tmp_path) -> None:
    store = open_store(str(tmp_path))
    store.write_atomic("a.bin", b"old")
    file = store.open_atomic("a.bin")
    file.write(b"new")
    assert store.read("a.bin") == b"old"
    file.commit()
    assert store.read("a.bin") == b"new"


@pytest.mark.parametrize("how", ["discard", "failed write"])
def test_a_write_that_does_not_commit_leaves_nothing(tmp_path, how) -> None:
    store = open_store(str(tmp_path))
    file = store.open_atomic("shards/a.sks")
    file.write(b"some bytes")
    if how == "discard":
        file.discard()
        file.discard()  # idempotent
    else:
        with pytest.raises(TypeError):
            file.write(12345)  # type: ignore[arg-type]
    assert os.listdir(tmp_path / "shards") == []


def test_write_atomic_leaves_no_temp_file(tmp_path) -> None:
    store = open_store(str(tmp_path))
    store.write_atomic("dir/x.bin", b"abc")
    assert os.listdir(tmp_path / "dir") == ["x.bin"]
