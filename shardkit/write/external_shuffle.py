"""``ExternalShuffle``: samples sorted by their shuffle key in bounded memory (specs/pack-shuffle.md PS3).

It sorts by key (shuffle_order.py) in at most ``memory_bytes`` of held samples: it keeps
samples in memory until they exceed the budget, then scatters every sample into one of
256 bucket files by the top 8 bits of its key. Draining reads back one bucket at a time
(bucket ``b`` holds exactly the keys with top bits ``b``, so buckets come out in key order),
sorts it in memory and yields it; a bucket still larger than the budget is scattered again by
the next 8 bits first. Temp disk: one copy of the encoded samples plus 12 bytes per sample.

Not thread-safe; one instance per pack.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from types import TracebackType
from typing import BinaryIO

import numpy as np

from shardkit.errors import ShardkitError
from shardkit.units import parse_size
from shardkit.write.shuffle_order import ShuffleOptions, sort_keys

log = logging.getLogger(__name__)

FAN_OUT_BITS = 8
_RECORD = struct.Struct("<QI")  # key, length; then the encoded sample
_FILE_BUFFER = 64 << 10


class ExternalShuffle:
    """Collect encoded samples in source order; :meth:`drain` yields them sorted by key."""

    def __init__(self, options: ShuffleOptions, fan_out_bits: int = FAN_OUT_BITS) -> None:
        if fan_out_bits not in (1, 2, 4, 8):
            raise ValueError(f"fan_out_bits: expected 1, 2, 4 or 8, got {fan_out_bits!r}")
        self.options = options
        self.bits, self.fan_out = fan_out_bits, 1 << fan_out_bits
        self.memory = parse_size(options.memory)
        self.num_samples = 0
        self.spilled_bytes = 0  # bytes written to temp files, all levels (the temp disk cost)
        self._keys: list[np.ndarray] = []
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._dir: str | None = None
        self._buckets: list[BinaryIO] = []

    def add(self, encoded: list[bytes]) -> None:
        """Append the next samples of the source (their keys follow from their positions)."""
        keys = sort_keys(self.options.seed, self.num_samples, len(encoded))
        self.num_samples += len(encoded)
        if self._buckets:
            self._scatter(self._buckets, keys, encoded, 0)
            return
        self._keys.append(keys)
        self._held.extend(encoded)
        self._held_bytes += sum(len(data) for data in encoded)
        if self._held_bytes > self.memory:
            self._spill()

    def drain(self) -> Iterator[list[bytes]]:
        """Every sample added, in key order, in pieces of at most the memory budget."""
        if not self._buckets:
            keys = np.concatenate(self._keys) if self._keys else np.zeros(0, dtype=np.uint64)
            held, self._held, self._keys = self._held, [], []
            yield [held[i] for i in np.argsort(keys).tolist()]
            return
        folder = self._close_buckets()
        for bucket in range(self.fan_out):
            yield from self._drain_file(os.path.join(folder, f"{bucket:02x}"), 1)

    def close(self) -> None:
        """Remove the temp files (also after an error)."""
        for fh in self._buckets:
            fh.close()
        self._buckets = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> ExternalShuffle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- internals --------------------------------------------------------------------------
    def _spill(self) -> None:
        try:
            self._dir = tempfile.mkdtemp(prefix="shardkit-shuffle-", dir=self.options.tmp_dir)
        except OSError as exc:
            where = self.options.tmp_dir or tempfile.gettempdir()
            raise ShardkitError(f"{where}: cannot create the shuffle's temp folder: {exc}") from None
        log.info("shuffle: %d samples exceed the %d-byte budget; scattering to %s",
                 self.num_samples, self.memory, self._dir)
        self._buckets = self._open_buckets(os.path.join(self._dir, "b"))
        keys = np.concatenate(self._keys)
        held, self._held, self._keys, self._held_bytes = self._held, [], [], 0
        self._scatter(self._buckets, keys, held, 0)

    def _open_buckets(self, folder: str) -> list[BinaryIO]:
        os.makedirs(folder)
        return [open(os.path.join(folder, f"{b:02x}"), "wb", buffering=_FILE_BUFFER) for b in range(self.fan_out)]

    def _close_buckets(self) -> str:
        for fh in self._buckets:
            fh.close()
        self._buckets = []
        if self._dir is None:
            raise ShardkitError("shuffle: buckets closed before they were opened")
        return os.path.join(self._dir, "b")

    def _scatter(self, files: list[BinaryIO], keys: np.ndarray, encoded: list[bytes], level: int) -> None:
        """Append each sample to the bucket named by the ``level``-th group of key bits (from the top)."""
        shift = np.uint64(64 - self.bits * (level + 1))
        buckets = ((keys >> shift) & np.uint64(self.fan_out - 1)).tolist()
        pack = _RECORD.pack
        for key, bucket, data in zip(keys.tolist(), buckets, encoded, strict=True):
            files[bucket].write(pack(key, len(data)))
            files[bucket].write(data)
            self.spilled_bytes += _RECORD.size + len(data)

    def _drain_file(self, path: str, level: int) -> Iterator[list[bytes]]:
        size = os.path.getsize(path)
        if size <= self.memory or level * self.bits >= 64 or _single_record(path, size):
            keys, encoded = _read_bucket(path)
            os.unlink(path)
            if encoded:
                yield [encoded[i] for i in np.argsort(keys).tolist()]
            return
        folder = path + ".d"
        files = self._open_buckets(folder)
        try:
            for keys, encoded in _read_bucket_pieces(path, self.memory):
                self._scatter(files, keys, encoded, level)
        finally:
            for fh in files:
                fh.close()
        os.unlink(path)
        for bucket in range(self.fan_out):
            yield from self._drain_file(os.path.join(folder, f"{bucket:02x}"), level + 1)


def _single_record(path: str, size: int) -> bool:
    """True when the bucket holds one sample (bigger than the budget: it cannot be split)."""
    with open(path, "rb") as fh:
        head = fh.read(_RECORD.size)
    return len(head) == _RECORD.size and _RECORD.size + _RECORD.unpack(head)[1] == size


def _read_bucket(path: str) -> tuple[np.ndarray, list[bytes]]:
    pieces = list(_read_bucket_pieces(path, None))
    if not pieces:
        return np.zeros(0, dtype=np.uint64), []
    return np.concatenate([k for k, _ in pieces]), [d for _, e in pieces for d in e]


def _read_bucket_pieces(path: str, piece_bytes: int | None) -> Iterator[tuple[np.ndarray, list[bytes]]]:
    """The records of a bucket file, in pieces of about ``piece_bytes`` (None: one piece)."""
    unpack, header = _RECORD.unpack, _RECORD.size
    with open(path, "rb", buffering=_FILE_BUFFER) as fh:
        keys: list[int] = []
        encoded: list[bytes] = []
        held = 0
        while head := fh.read(header):
            if len(head) != header:
                raise ShardkitError(f"{path}: truncated shuffle record (temp file damaged)")
            key, length = unpack(head)
            data = fh.read(length)
            if len(data) != length:
                raise ShardkitError(f"{path}: truncated shuffle record (temp file damaged)")
            keys.append(key)
            encoded.append(data)
            held += header + length
            if piece_bytes is not None and held >= piece_bytes:
                yield np.array(keys, dtype=np.uint64), encoded
                keys, encoded, held = [], [], 0
        if keys:
            yield np.array(keys, dtype=np.uint64), encoded
