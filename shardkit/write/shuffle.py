"""Pack-time shuffle: samples written in a seeded random order, in bounded memory (specs/pack-shuffle.md).

The order is defined by a key per sample, never by how the shuffle ran: sample ``i`` (its
position among the encoded samples, in source order) gets ``sort_keys(seed, i)``, a keyed
bijection of ``i`` onto 64-bit integers, and the dataset is the samples sorted by key (PS1). The
keys are distinct, so the sort has no ties, and any algorithm that sorts by them gives the same
order: the same bytes for any ``--workers``, memory budget, temp folder or engine (PS2).

:class:`ExternalShuffle` sorts by key in at most ``memory_bytes`` of held samples (PS3): it keeps
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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, BinaryIO, Protocol

import numpy as np

from shardkit.errors import ShardkitError
from shardkit.format import Manifest, SampleEncoder, SchemaBuilder
from shardkit.plan.rng import philox_key
from shardkit.units import parse_size
from shardkit.write.writer import PublishOnExit, ShardWriter

log = logging.getLogger(__name__)

SALT_PACK_SHUFFLE = 4  # after the plan's salts 1-3 (specs/partition.md, "RNG keys")
METHOD = "sort-by-key-v1"
FAN_OUT_BITS = 8
_RECORD = struct.Struct("<QI")  # key, length; then the encoded sample
_FILE_BUFFER = 64 << 10
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class ShuffleOptions:
    """How ``pack`` shuffles: ``seed`` picks the order, ``memory`` bounds the samples held,
    ``tmp_dir`` holds the bucket files (default: the system temp folder)."""

    seed: int = 0
    memory: int | str = "256MiB"
    tmp_dir: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"shuffle seed: expected an int >= 0, got {self.seed!r}")
        if parse_size(self.memory) < 1:
            raise ValueError(f"shuffle memory: expected a size >= 1 byte, got {self.memory!r}")

    def describe(self) -> dict[str, Any]:
        """The manifest's ``order`` object for a dataset packed with these options (M9)."""
        return {"shuffled": True, "method": METHOD, "seed": self.seed}


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, a bijection of uint64 (each step is invertible)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def sort_keys(seed: int, start: int, count: int) -> np.ndarray:
    """Keys of samples ``start … start + count - 1``: distinct uint64s, a pure function of
    ``(seed, index)`` (PS1)."""
    words = philox_key(SALT_PACK_SHUFFLE, seed)
    offset, salt = np.uint64(words & _MASK64), np.uint64(words >> 64)
    x = np.arange(start, start + count, dtype=np.uint64)
    x += offset  # wraps modulo 2**64 (array arithmetic never warns)
    x = _mix(x)
    x ^= salt
    return _mix(x)


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


class _Chunk(Protocol):
    encoded: list[bytes]
    schema: dict[str, Any]


def write_chunks(writer: ShardWriter, chunks: Iterable[_Chunk], shuffle: ShuffleOptions | None) -> int:
    """Write encoded chunks (source order) to ``writer``: as they come, or sorted by key (PS1),
    and record which in the manifest's ``order`` (M9). Returns the temp bytes written (PS4)."""
    if shuffle is None:
        for chunk in chunks:
            writer.write_encoded(chunk.encoded, chunk.schema)
        writer.order = {"shuffled": False}
        return 0
    with ExternalShuffle(shuffle) as external:
        for chunk in chunks:
            writer.observe_schema(chunk.schema, len(chunk.encoded))
            external.add(chunk.encoded)
        for piece in external.drain():
            writer.write_encoded(piece, None)
        log.info("shuffle: %d samples, %d bytes of temp files", external.num_samples, external.spilled_bytes)
    writer.order = shuffle.describe()
    return external.spilled_bytes


class ShuffledWriter(PublishOnExit):
    """A ``ShardWriter`` front that writes its samples in the pack-time shuffle order (PS1):
    ``write`` encodes and collects (at most ``options.memory`` held, PS3), ``close`` sorts them
    into ``writer`` and publishes the manifest with its ``order``. The order is the one
    ``shardkit pack`` gives the same samples with the same seed. Not thread-safe.

    Usage::

        with ShuffledWriter(ShardWriter("out/"), ShuffleOptions(seed=0)) as writer:
            for sample in samples:
                writer.write(sample)
    """

    CHUNK = 256

    def __init__(self, writer: ShardWriter, options: ShuffleOptions | None = None) -> None:
        self.writer, self.options = writer, options or ShuffleOptions()
        self._external = ExternalShuffle(self.options)
        self._encoder, self._schema = SampleEncoder(), SchemaBuilder()
        self._chunk: list[bytes] = []

    def write(self, sample: dict[str, Any]) -> None:
        """Append one sample (``EncodeError`` names the field and the sample's index)."""
        self._chunk.append(self._encoder.encode(sample, self._external.num_samples + len(self._chunk)))
        self._schema.observe(sample)
        if len(self._chunk) >= self.CHUNK:
            self._flush()

    def close(self) -> Manifest:
        """Sort what was written into the writer, then publish the manifest."""
        self._flush()
        try:
            for piece in self._external.drain():
                self.writer.write_encoded(piece, None)
        finally:
            self._external.close()
        self.writer.order = self.options.describe()
        return self.writer.close()

    def _flush(self) -> None:
        if self._chunk:
            self.writer.observe_schema(self._schema.fields, len(self._chunk))
            self._external.add(self._chunk)
            self._chunk, self._schema = [], SchemaBuilder()

    @property
    def closed(self) -> bool:
        return self.writer.closed

    def abort(self) -> None:
        """Stop without a manifest: remove the temp files and the shards written so far."""
        self._external.close()
        self.writer.abort()
