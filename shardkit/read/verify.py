"""Verify a dataset: every shard's size and checksum, every block, every sample
(specs/shard-format.md V1–V3, I5, B5; specs/manifest.md).

A full check reads each shard once, whole; ``quick`` stops after sizes and whole-file
checksums. Shards are checked in parallel threads (xxhash and zstd release the GIL).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shardkit.errors import FormatError, StorageError
from shardkit.format import ShardInfo, check_sample
from shardkit.format.checksum import xxh64_text
from shardkit.read.column_pieces import as_samples
from shardkit.read.dataset import StoredDataset
from shardkit.read.orphans import unnamed_files
from shardkit.read.shard_reader import ShardReader
from shardkit.read.sources import MemorySource


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

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.shards)

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
            "unnamed_files": self.unnamed_files,
        }


def verify_shard(dataset: StoredDataset, info: ShardInfo, quick: bool = False) -> ShardReport:
    report = ShardReport(info.name)
    url = dataset.store.url_of(info.name)
    try:
        data = dataset.store.read(info.name)
    except StorageError as exc:
        report.fail(f"{url}: cannot read: {exc}")
        return report
    if len(data) != info.num_bytes:
        report.fail(f"{url}: {len(data)} bytes, manifest says {info.num_bytes}")
    checksum = xxh64_text(data)
    if checksum != info.checksum:
        report.fail(f"{url}: checksum {checksum}, manifest says {info.checksum}")
    if quick:
        return report
    _check_contents(dataset, info, data, url, report)
    return report


def _check_contents(dataset: StoredDataset, info: ShardInfo, data: bytes, url: str, report: ShardReport) -> None:
    try:
        reader = ShardReader(MemorySource(data, url), None, info.name)
        reader.check_header()
    except FormatError as exc:
        report.fail(str(exc), 0)
        return
    try:
        reader.check_against_manifest(reader.index, info)
    except FormatError as exc:
        report.fail(str(exc))
    schema = dataset.manifest.schema
    for block_index in range(reader.num_blocks):
        first = int(reader.index.first_sample[block_index])
        try:
            samples = as_samples(reader.block_samples(block_index))
        except FormatError as exc:
            report.fail(str(exc), first)
            continue
        for offset, sample in enumerate(samples):
            problem = check_sample(sample, schema)
            if problem:
                report.fail(f"{url}: sample {first + offset}: {problem}", first + offset)
                break


def verify_dataset(
    dataset: StoredDataset,
    quick: bool = False,
    workers: int = 4,
    on_shard: Callable[[ShardReport], None] | None = None,
) -> VerifyReport:
    """Check every shard of ``dataset``; ``on_shard`` is called as each finishes (progress)."""
    shards = dataset.manifest.shards

    def one(info: ShardInfo) -> ShardReport:
        report = verify_shard(dataset, info, quick)
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
    )
