"""Checking bytes against the ETag a store returned for them (specs/cache.md K44).

An S3 ETag is the MD5 of the object for a single PUT (``"<32 hex>"``), and the MD5 of its
parts' MD5s for a multipart upload (``"<32 hex>-<parts>"``). A copy of an object whose MD5
matches the ETag that the job itself obtained from the store (a HEAD) holds the bytes the store
holds, wherever the copy came from. Not every ETag is an MD5 (SSE-KMS and SSE-C objects, other
stores' version tokens, multipart uploads with a part size we do not guess): those match
nothing here, and the caller reads the object from the store instead.
"""

from __future__ import annotations

import hashlib
import re

_ETAG = re.compile(r'^"?([0-9a-fA-F]{32})(?:-([1-9][0-9]{0,4}))?"?$')
_MIB = 1 << 20
_GUESSED_PARTS = (8 * _MIB, 16 * _MIB, 5 * _MIB, 64 * _MIB)  # aws-cli, shardkit, S3's minimum, large


def checkable(version: str) -> bool:
    """``version`` has the form of an S3 ETag (it may still not be an MD5: SSE-KMS)."""
    return _ETAG.match(version) is not None


def matches_etag(data: bytes | memoryview, version: str, part_bytes: int | None = None) -> bool:
    """``data``'s MD5 (single part) or multipart MD5 equals the ETag ``version``; ``part_bytes``:
    the writer's part size, tried first (shardkit's own ``Store.part_bytes``)."""
    found = _ETAG.match(version)
    if found is None:
        return False
    digest, parts = found.group(1).lower(), found.group(2)
    view = memoryview(data)
    if parts is None:
        return hashlib.md5(view, usedforsecurity=False).hexdigest() == digest
    count = int(parts)
    sizes = [s for s in (part_bytes, *_GUESSED_PARTS) if s and -(-len(view) // s) == count]
    return any(_multipart_md5(view, size) == digest for size in dict.fromkeys(sizes))


def _multipart_md5(view: memoryview, part_bytes: int) -> str:
    joined = b"".join(hashlib.md5(view[i:i + part_bytes], usedforsecurity=False).digest()
                      for i in range(0, len(view), part_bytes))
    return hashlib.md5(joined, usedforsecurity=False).hexdigest()
