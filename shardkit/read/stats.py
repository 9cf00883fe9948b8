"""Counters of where a reader's time goes (stall diagnosis, G10 in docs/guarantees.md).
Not thread-safe: one per consumer."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class ReadStats:
    fetch_seconds: float = 0.0  # opening shards: cache downloads and waits, footer/index reads
    io_seconds: float = 0.0  # block reads: checksummed views of mapped files, or range requests
    decode_seconds: float = 0.0  # checksum, decompression and msgpack unpacking
    raw_bytes: int = 0  # decompressed bytes produced
    blocks: int = 0

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}
