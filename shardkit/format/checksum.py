"""Checksums (xxhash). Text form: ``"xxh64:<16 hex digits>"``; fingerprints use xxh3-128."""

from __future__ import annotations

import xxhash

from shardkit.errors import FormatError

XXH64_PREFIX = "xxh64:"


def xxh64_int(data: bytes | memoryview) -> int:
    """xxh64 (seed 0) of ``data`` as an unsigned 64-bit int."""
    return int(xxhash.xxh64_intdigest(data))


def xxh64_text(data: bytes | memoryview) -> str:
    return XXH64_PREFIX + xxhash.xxh64_hexdigest(data)


def xxh64_file(path: str, chunk_size: int = 1 << 20) -> str:
    """``xxh64:…`` of a whole file, read in chunks into one reused buffer (a fresh bytes object
    per chunk cost as much CPU as the hash: this verifies every cache download)."""
    hasher = xxhash.xxh64()
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as fh:
        while got := fh.readinto(buffer):
            hasher.update(view[:got])
    return XXH64_PREFIX + hasher.hexdigest()


class StreamingChecksum:
    """Incremental ``xxh64:…`` over bytes fed in order."""

    def __init__(self) -> None:
        self._hasher = xxhash.xxh64()

    def update(self, data: bytes | memoryview) -> None:
        self._hasher.update(data)

    def text(self) -> str:
        return XXH64_PREFIX + self._hasher.hexdigest()


def fingerprint_text(data: bytes) -> str:
    """The dataset fingerprint form: ``"xxh3-128:<32 hex digits>"``."""
    return "xxh3-128:" + xxhash.xxh3_128_hexdigest(data)


def check_checksum_text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.startswith(XXH64_PREFIX) or len(value) != 22:
        raise FormatError(f"{where}: checksum must look like 'xxh64:<16 hex>', got {value!r}")
    try:
        int(value[len(XXH64_PREFIX):], 16)
    except ValueError:
        raise FormatError(f"{where}: checksum is not hex: {value!r}") from None
    return value
