"""K23: a spliced body piece lands exactly at its offset, taking exactly its bytes out of the
pipe; a file that refuses ``splice`` gets the same bytes by ``pwrite``. Real pipes, real files."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.storage.body_splice import splice_to_file

pytestmark = pytest.mark.skipif(not hasattr(os, "splice"), reason="os.splice is Linux-only")


def _piped(data: bytes) -> tuple[int, int]:
    pipe_out, pipe_in = os.pipe()
    assert os.write(pipe_in, data) == len(data)
    return pipe_out, pipe_in


@settings(max_examples=40, deadline=None)
@given(pieces=st.lists(st.binary(min_size=1, max_size=20_000), min_size=1, max_size=6), data=st.data())
def test_spliced_pieces_land_at_their_offsets_and_leave_the_pipe_as_it_was_after_them_k23(
    tmp_path_factory: Any, pieces: list[bytes], data: Any
) -> None:
    total = sum(map(len, pieces))
    order = data.draw(st.permutations(range(len(pieces))))  # parts arrive in any order
    offsets = [sum(map(len, pieces[:i])) for i in range(len(pieces))]
    path = tmp_path_factory.mktemp("splice") / "file"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, total)
        for index in order:
            pipe_out, pipe_in = _piped(pieces[index] + b"next")  # more than the piece waits
            try:
                splice_to_file(pipe_out, fd, len(pieces[index]), offsets[index])
                assert os.read(pipe_out, 100) == b"next"  # exactly the piece was taken
            finally:
                os.close(pipe_out)
                os.close(pipe_in)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(pieces)


def test_a_file_that_refuses_splice_gets_the_bytes_by_pwrite_k23(tmp_path: Any) -> None:
    """``splice`` into an ``O_APPEND`` file fails with EINVAL: the fallback copies instead."""
    path = tmp_path / "file"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for offset, piece in ((0, b"a" * 50_000), (50_000, b"b" * 5)):
            pipe_out, pipe_in = _piped(piece)
            try:
                with pytest.raises(OSError):  # the premise: this file takes no splice
                    os.splice(pipe_out, fd, 1, offset_dst=offset)
                splice_to_file(pipe_out, fd, len(piece), offset)
            finally:
                os.close(pipe_out)
                os.close(pipe_in)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"a" * 50_000 + b"b" * 5
