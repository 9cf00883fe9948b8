"""Counters of where a reader's time goes (stall diagnosis, G10 in docs/guarantees.md).
Not thread-safe: one per consumer."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class ReadStats:
    fetch_seconds: float = 0.0  # opening shards: cache downloads and waits, footer/index reads
    io_seconds: float = 0.0  # block reads: pread of local files (RP2), or range requests
    decode_seconds: float = 0.0  # checksum, decompression and msgpack unpacking
    raw_bytes: int = 0  # decompressed bytes produced
    blocks: int = 0
    ahead_blocks: int = 0  # blocks a run across spans took from the read-ahead helper (fetcher.py)
    span_starts_ahead: int = 0  # of those, a span's first block: fetched while an earlier span was read
    slowest_open_seconds: float = 0.0  # the longest single shard open (cross-rank view names it)
    slowest_shard: int = -1  # manifest index of that shard; -1: none opened yet

    def opened(self, shard_index: int, seconds: float) -> None:
        """Count ``seconds`` spent opening shard ``shard_index``."""
        self.fetch_seconds += seconds
        if seconds > self.slowest_open_seconds:
            self.slowest_open_seconds, self.slowest_shard = seconds, shard_index

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}
