"""No cache dir: a shard's blocks are fetched ahead by concurrent, coalesced range requests
(K33 in specs/cache.md), against the real moto server through the fault proxy, which injects
latency and errors and counts the requests it answers at once."""

from __future__ import annotations

import gc
import threading
from typing import Any

import numpy as np
import pytest
import s3fs

import shardkit as sk
from shardkit.errors import CorruptShardError, StorageError
from shardkit.read import open_dataset
from shardkit.read.options import ReadOptions
from shardkit.read.range_ahead import RangeOptions, group_blocks
from shardkit.read.shard_reader import ShardReader
from shardkit.read.sources import StoreSource
from tests.helpers.fault_proxy import Fault, FaultProxy
from tests.helpers.s3 import storage_options, write_s3_tokens

pytestmark = [pytest.mark.s3, pytest.mark.filterwarnings("ignore::UserWarning:torch.utils.data.dataloader")]

NUM_SAMPLES = 400
SMALL = RangeOptions(max_requests=3, max_bytes=64 << 10, coalesce_bytes=3 << 10)


@pytest.fixture
def s3_blocks(s3_bucket: tuple[str, dict[str, Any]]) -> tuple[str, sk.Manifest]:
    """400 samples in 2 shards of ~20 blocks of ~1 KiB (stored uncompressed: random tokens)."""
    url, manifest = write_s3_tokens(
        s3_bucket, NUM_SAMPLES, lambda rng: rng.integers(0, 1 << 30, 24, dtype=np.int32),
        seed=3, shard_size="24KiB", block_size="1KiB",
    )
    assert all(s.num_blocks >= 8 for s in manifest.shards)
    return url, manifest


def _reader(url: str, manifest: sk.Manifest, proxy: FaultProxy, ranges: RangeOptions = SMALL) -> ShardReader:
    dataset = open_dataset(url, storage_options(proxy.endpoint_url))
    info = manifest.shards[0]
    return ShardReader(StoreSource(dataset.store, info.name, info.num_bytes), info, options=ReadOptions(ranges=ranges))


def _range_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("shardkit-range")]


def test_blocks_are_fetched_concurrently_and_joined(
    s3_blocks: tuple[str, sk.Manifest], fault_proxy: FaultProxy
) -> None:
    """K33: with 0.2 s of latency on every block request, up to ``max_requests`` are answered at
    once (never more), adjacent blocks share a request, and the samples are the ones written."""
    url, manifest = s3_blocks
    info = manifest.shards[0]
    fault_proxy.add(Fault(kind="slow", rate=1.0, key=info.name, delay=0.2))
    with _reader(url, manifest, fault_proxy) as reader:
        before = len(fault_proxy.records("GET", info.name))
        ids = [sample["id"] for sample in reader.samples()]
    assert ids == list(range(info.num_samples))
    assert fault_proxy.max_in_flight == SMALL.max_requests
    gets = fault_proxy.records("GET", info.name)[before:]
    sizes = reader.index.blocks["stored_size"]
    assert len(gets) == len(group_blocks(sizes, range(info.num_blocks), SMALL.coalesce_bytes))
    assert len(gets) < info.num_blocks
    assert not _range_threads()


def test_a_failed_request_names_the_shard_and_block(
    s3_blocks: tuple[str, sk.Manifest], fault_proxy: FaultProxy
) -> None:
    """K33: a request failing on a pool thread is raised where the consumer reaches its blocks,
    naming the URL, the shard and the block; samples before it were handed out."""
    url, manifest = s3_blocks
    info = manifest.shards[0]
    fault_proxy.add(Fault(kind="status", status=403, requests=frozenset({4}), key=info.name))
    reader = _reader(url, manifest, fault_proxy)  # request 1: the index
    got: list[int] = []
    with pytest.raises(StorageError) as caught:
        for sample in reader.samples():
            got.append(sample["id"])
    text = str(caught.value) + " ".join(getattr(caught.value, "__notes__", []))
    assert info.name in text and "block " in text, text
    assert got and got == list(range(len(got)))
    assert not _range_threads()


def test_a_corrupt_block_is_caught_on_the_fetching_thread(
    s3_blocks: tuple[str, sk.Manifest], fault_proxy: FaultProxy
) -> None:
    """I5 + K33: a block whose bytes changed in the store fails its checksum, naming the block."""
    url, manifest = s3_blocks
    info = manifest.shards[0]
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **storage_options(fault_proxy.endpoint_url))
    path = f"{url[len('s3://') :]}/{info.name}"
    with _reader(url, manifest, fault_proxy) as reader:
        block = reader.index.blocks[5]
        data = bytearray(fs.cat_file(path))
        data[int(block["offset"]) + 3] ^= 0xFF
        fs.pipe_file(path, bytes(data))
        with pytest.raises(CorruptShardError, match=r"block 5 .*checksum mismatch"):
            list(reader.samples())
    assert not _range_threads()


def test_early_break_leaves_no_thread(s3_blocks: tuple[str, sk.Manifest], fault_proxy: FaultProxy) -> None:
    """K33: a consumer that stops after one batch while requests are in flight (slow server)
    leaves no read-ahead thread behind, at W=0 (in this process)."""
    url, _ = s3_blocks
    fault_proxy.add(Fault(kind="slow", rate=1.0, key="/shards/", delay=0.1))
    dataset = sk.StreamingDataset(
        url, batch_size=4, shuffle=False, cache_dir=False,  # no cache: range reads (K33, K47)
        storage_options=storage_options(fault_proxy.endpoint_url)
    )
    batches = iter(sk.ShardLoader(dataset, num_workers=0))
    next(batches)
    assert _range_threads()
    del batches
    gc.collect()
    assert not _range_threads()


@pytest.mark.slow
def test_forked_workers_read_ahead_exactly_once(s3_blocks: tuple[str, sk.Manifest], fault_proxy: FaultProxy) -> None:
    """K17 + K33: DataLoader workers (fork) each read ahead over their own connections; every
    sample exactly once, several requests answered at once, and a break mid-epoch returns."""
    url, _ = s3_blocks
    options = storage_options(fault_proxy.endpoint_url)
    dataset = sk.StreamingDataset(
        url, batch_size=8, shuffle=True, seed=5, with_index=True, tail="pad", storage_options=options,
        cache_dir=False,  # no cache: range reads (K33, K47)
    )
    seen: list[int] = []
    for batch in sk.ShardLoader(dataset, num_workers=2):
        seen += batch["_index"][~batch["_padded"]].tolist()
    assert sorted(seen) == list(range(NUM_SAMPLES))
    assert fault_proxy.max_in_flight >= 2
    fault_proxy.add(Fault(kind="slow", rate=1.0, key="/shards/", delay=0.1))
    for count, _ in enumerate(sk.ShardLoader(dataset, num_workers=2)):
        if count == 2:
            break
    assert not _range_threads()
