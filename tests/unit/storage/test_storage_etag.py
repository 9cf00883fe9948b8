"""Bytes checked against an S3-style ETag (specs/cache.md K44): single-part MD5, multipart MD5
of part MD5s, and ETags that are no MD5 match nothing."""

from __future__ import annotations

import hashlib

from shardkit.storage.etag import checkable, matches_etag


def _multipart_etag(data: bytes, part: int) -> str:
    digests = b"".join(hashlib.md5(data[i:i + part]).digest() for i in range(0, len(data), part))
    return f'"{hashlib.md5(digests).hexdigest()}-{-(-len(data) // part)}"'


def test_single_part_etag_is_the_md5() -> None:
    data = b"manifest bytes" * 100
    etag = f'"{hashlib.md5(data).hexdigest()}"'
    assert checkable(etag) and matches_etag(data, etag)
    assert not matches_etag(data[:-1] + b"X", etag)


def test_multipart_etag_with_the_writers_part_size() -> None:
    data = bytes(range(256)) * 40
    etag = _multipart_etag(data, 1000)
    assert matches_etag(data, etag, part_bytes=1000)
    assert not matches_etag(data, etag, part_bytes=999)  # another part count: not guessed
    assert not matches_etag(data[:-1] + b"\0", etag, part_bytes=1000)


def test_version_tokens_that_are_no_etag_match_nothing() -> None:
    for version in ("1733070000.123", "", "generation-17", '"abc"', '"' + "0" * 32 + '-0"'):
        assert not matches_etag(b"x", version)
