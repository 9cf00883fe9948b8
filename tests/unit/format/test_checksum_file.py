"""``xxh64_file`` (the verify of every cache download) is the xxh64 of the file's bytes, for
any file size and read size."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.format.checksum import xxh64_file, xxh64_text


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000), chunk_size=st.integers(1, 4096))
def test_the_file_checksum_is_the_checksum_of_its_bytes(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, chunk_size: int
) -> None:
    path = tmp_path_factory.mktemp("sum") / "file"
    path.write_bytes(data)
    assert xxh64_file(str(path), chunk_size) == xxh64_text(data)
