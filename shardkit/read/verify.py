"""Verify a dataset: every shard's size and checksum, every block, every sample
(specs/shard-format.md I1–I14, V1–V3, B5; specs/manifest.md).

Memory stays bounded whatever a shard holds or declares (I13): a shard's size is checked before
anything is read, a FIFO or device is refused unread, the whole-file checksum is streamed in
chunks, and a full check reads, decompresses and decodes one block at a time — a block that
declares more than the reader's limit (I12) is refused before it is read, and all verify threads
together hold at most ``DECODE_BUDGET_BYTES`` of decompressed blocks. A full check of a
well-formed shard still reads its bytes once: the checksum is fed by the block reads.
Shards are checked in parallel threads (xxhash and zstd release the GIL).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any

from shardkit.errors import FormatError, StorageError
from shardkit.format import ShardInfo, check_sample
from shardkit.format.checksum import StreamingChecksum
from shardkit.format.length_index import LengthsInfo
from shardkit.read.column_pieces import as_samples
from shardkit.read.dataset import StoredDataset
from shardkit.read.orphans import unnamed_files
from shardkit.read.shard_blocks import ByteSource, resolve_max_block_bytes
from shardkit.read.shard_reader import ShardReader
from shardkit.read.sources import open_source
from shardkit.read.verify_lengths import check_length_index

#: Decompressed blocks held at once by all verify threads (one larger block is held alone).
DECODE_BUDGET_BYTES = 256 << 20
_CHUNK_BYTES = 8 << 20


@dataclass
class ShardReport:
    name: str
    ok: bool = True
    errors: list[str] = field(default_factory=list)
    first_bad_sample: int | None = None

    def fail(self, message: str, sample: int | None = None) -> None:
        self.ok = False
        self.errors.append(message)
        if sample is not None and self.first_bad_sample is None:
            self.first_bad_sample = sample


@dataclass
class VerifyReport:
    url: str
    fingerprint: str
    num_samples: int
    quick: bool
    shards: list[ShardReport]
    unnamed_files: list[str] = field(default_factory=list)  # a warning, not a failure (W5)
    length_indexes: list[ShardReport] = field(default_factory=list)  # M11

    @property
    def ok(self) -> bool:
        return all(s.ok for s in (*self.shards, *self.length_indexes))

    def to_dict(self) -> dict[str, Any]:
        bad = [s.__dict__ for s in self.shards if not s.ok]
        return {
            "url": self.url,
            "ok": self.ok,
            "quick": self.quick,
            "fingerprint": self.fingerprint,
            "num_samples": self.num_samples,
            "num_shards": len(self.shards),
            "num_bad_shards": len(bad),
            "bad_shards": bad,
            "bad_length_indexes": [s.__dict__ for s in self.length_indexes if not s.ok],
            "unnamed_files": self.unnamed_files,
        }


class ByteBudget:
    """Bytes that threads take before decompressing a block and give back after: at most
    ``limit`` are out at once, except that one request larger than ``limit`` runs alone."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, num_bytes: int) -> Iterator[None]:
        num_bytes = min(num_bytes, self.limit)
        with self._cond:
            self._cond.wait_for(lambda: self._used + num_bytes <= self.limit)
            self._used += num_bytes
        try:
            yield
        finally:
            with self._cond:
                self._used -= num_bytes
                self._cond.notify_all()


class HashingSource:
    """A source that feeds the whole-file checksum with the bytes read in file order (header,
    then contiguous blocks: I3) and keeps the file's tail (the reader's first request: index and
    footer), so a full check of a well-formed shard reads each byte once; ``checksum()`` streams
    whatever is left in chunks (everything, after a quick check or a broken structure)."""

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.where = source.where
        self._hasher = StreamingChecksum()
        self._hashed = 0  # bytes [0, _hashed) are in the hasher
        self._tail: tuple[int, bytes | memoryview] | None = None  # (start, bytes up to the end)

    def size(self) -> int:
        return self.source.size()

    def read_range(self, start: int, end: int) -> bytes | memoryview:
        tail = self._tail
        if tail is not None and start >= tail[0] and end <= tail[0] + len(tail[1]):
            data = tail[1][start - tail[0] : end - tail[0]]
        else:
            data = self.source.read_range(start, end)
            if end == self.source.size() and end - start <= _CHUNK_BYTES:
                self._tail = (start, data)
        if start <= self._hashed < end:
            self._hasher.update(memoryview(data)[self._hashed - start :])
            self._hashed = end
        return data

    def checksum(self) -> str:
        size = self.source.size()
        while self._hashed < size:
            self.read_range(self._hashed, min(size, self._hashed + _CHUNK_BYTES))
        return self._hasher.text()

    def close(self) -> None:
        self.source.close()


def verify_shard(dataset: StoredDataset, info: ShardInfo, quick: bool = False, budget: ByteBudget | None = None,
                 max_block_bytes: int | None = None) -> ShardReport:
    """One shard's report. ``max_block_bytes``: the block limit (I12; default as readers')."""
    report = ShardReport(info.name)
    url = dataset.store.url_of(info.name)
    try:
        source = HashingSource(open_source(dataset.store, info.name))
        size = source.size()
    except StorageError as exc:
        report.fail(f"{url}: cannot read: {exc}")
        return report
    with closing(source):
        size_ok = size == info.num_bytes
        if not size_ok:
            report.fail(f"{url}: {size} bytes, manifest says {info.num_bytes} (checksum not computed)")
        if not quick:
            options = _Options(budget or ByteBudget(DECODE_BUDGET_BYTES), resolve_max_block_bytes(max_block_bytes))
            _check_contents(dataset, info, source, report, options)
        if size_ok:
            try:
                checksum = source.checksum()
            except (StorageError, OSError) as exc:
                report.fail(f"{url}: cannot read: {exc}")
                return report
            if checksum != info.checksum:
                report.fail(f"{url}: checksum {checksum}, manifest says {info.checksum}")
    return report


@dataclass(frozen=True)
class _Options:
    budget: ByteBudget
    max_block_bytes: int


def _check_contents(dataset: StoredDataset, info: ShardInfo, source: HashingSource, report: ShardReport,
                    options: _Options) -> None:
    try:
        reader = ShardReader(source, None, info.name, max_block_bytes=options.max_block_bytes)
        reader.check_header()
    except (FormatError, StorageError, OSError) as exc:
        report.fail(str(exc), 0)
        return
    try:
        reader.check_against_manifest(reader.index, info)
    except FormatError as exc:
        report.fail(str(exc))
    schema = dataset.manifest.schema
    for block_index in range(reader.num_blocks):
        first = int(reader.index.first_sample[block_index])
        with options.budget.hold(int(reader.index.blocks[block_index]["raw_size"])):
            try:
                samples = as_samples(reader.block_samples(block_index))
            except (FormatError, StorageError, OSError) as exc:
                report.fail(str(exc), first)
                continue
            for offset, sample in enumerate(samples):
                problem = check_sample(sample, schema)
                if problem:
                    report.fail(f"{source.where}: sample {first + offset}: {problem}", first + offset)
                    break
            del samples


def _length_index_report(dataset: StoredDataset, info: LengthsInfo, quick: bool) -> ShardReport:
    report = ShardReport(info.name)
    check_length_index(dataset, info, report.fail, quick)
    return report


def verify_dataset(
    dataset: StoredDataset,
    quick: bool = False,
    workers: int = 4,
    on_shard: Callable[[ShardReport], None] | None = None,
    max_block_bytes: int | None = None,
) -> VerifyReport:
    """Check every shard of ``dataset``; ``on_shard`` is called as each finishes (progress).
    ``max_block_bytes``: refuse blocks declaring more raw bytes (I12; default as readers')."""
    shards = dataset.manifest.shards
    budget = ByteBudget(DECODE_BUDGET_BYTES)
    limit = resolve_max_block_bytes(max_block_bytes)

    def one(info: ShardInfo) -> ShardReport:
        report = verify_shard(dataset, info, quick, budget, limit)
        if on_shard is not None:
            on_shard(report)
        return report

    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="shardkit-verify") as pool:
        reports = list(pool.map(one, shards))
    return VerifyReport(
        url=dataset.url,
        fingerprint=dataset.manifest.fingerprint,
        num_samples=dataset.manifest.num_samples,
        quick=quick,
        shards=reports,
        unnamed_files=unnamed_files(dataset),
        length_indexes=[_length_index_report(dataset, info, quick) for info in dataset.manifest.lengths],
    )
