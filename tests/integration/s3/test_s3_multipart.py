"""S3 output streams part by part (storage/multipart.py), against the moto S3 server.

A shard written to ``s3://`` is uploaded as it is written — a multipart upload whose parts go
out as each fills — and appears only, whole, at ``commit``; a discarded write leaves neither an
object nor an upload; a transient failure costs one part. Memory stays within a few parts
whatever the shard's size (before: the whole shard was kept, then joined into one more copy).
"""

from __future__ import annotations

import os
import tracemalloc
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from shardkit.read import open_dataset
from shardkit.storage import Store, open_store
from tests.helpers.fault_proxy import Fault, FaultProxy
from tests.helpers.s3 import storage_options

pytestmark = pytest.mark.s3
MiB = 1 << 20
PART = 5 * MiB  # S3's smallest part


def _uploads(store: Store) -> list[dict[str, Any]]:
    """The multipart uploads in progress in the store's bucket (asked of the server)."""
    bucket = store.root.split("/", 1)[0]
    return list(store.fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads", []))


def _parts(store: Store, upload: dict[str, Any]) -> int:
    bucket = store.root.split("/", 1)[0]
    listed = store.fs.call_s3("list_parts", Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    return len(listed.get("Parts", []))


@pytest.fixture
def store(s3_bucket: tuple[str, dict[str, Any]]) -> Store:
    opened = open_store(f"{s3_bucket[0]}/out", s3_bucket[1])
    opened.part_bytes = PART
    return opened


def test_parts_are_uploaded_while_writing_and_the_object_appears_only_at_commit(store: Store) -> None:
    data = os.urandom(13 * MiB)
    file = store.open_atomic("big.bin")
    for offset in range(0, 6 * MiB, 2 * MiB):
        file.write(data[offset:offset + 2 * MiB])
    (upload,) = _uploads(store)  # one part (5 MiB) is on the server; 1 MiB waits in memory
    assert upload["Key"].endswith("out/big.bin") and _parts(store, upload) == 1
    file.write(memoryview(data)[6 * MiB:])
    assert _parts(store, upload) == 2 and not store.exists("big.bin")
    file.commit()
    assert store.read("big.bin") == data
    assert _uploads(store) == []


def test_a_small_object_is_one_put_at_commit(store: Store) -> None:
    file = store.open_atomic("small.bin")
    file.write(b"x" * 1000)
    assert _uploads(store) == [] and not store.exists("small.bin")
    file.commit()
    assert store.read("small.bin") == b"x" * 1000


def test_discard_aborts_the_upload_and_publishes_nothing(store: Store) -> None:
    file = store.open_atomic("gone.bin")
    file.write(os.urandom(11 * MiB))
    assert len(_uploads(store)) == 1
    file.discard()
    file.discard()  # idempotent
    assert _uploads(store) == [] and not store.exists("gone.bin")
    with pytest.raises(ValueError, match="gone.bin"):
        file.write(b"more")


def test_a_transient_failure_resends_one_part_not_the_object(
        s3_bucket: tuple[str, dict[str, Any]], fault_proxy: FaultProxy) -> None:
    """G8: a 503 on the second part: that part is sent again; the object is whole."""
    proxied = open_store(f"{s3_bucket[0]}/out", storage_options(fault_proxy.endpoint_url))
    proxied.part_bytes = PART
    fault_proxy.add(Fault(kind="status", status=503, method="PUT", key="big.bin", requests=frozenset({2})))
    data = os.urandom(12 * MiB)
    file = proxied.open_atomic("big.bin")
    file.write(data)
    file.commit()
    puts = fault_proxy.records("PUT", "big.bin")
    assert [r.status for r in puts] == [200, 503, 200, 200]  # parts 1, 2 (failed), 2, 3
    assert proxied.read("big.bin") == data


def test_writer_memory_stays_within_a_few_parts_whatever_the_shard_size(
        s3_bucket: tuple[str, dict[str, Any]]) -> None:
    """A 40 MiB shard of incompressible samples, written to S3 in 5 MiB parts: the traced
    peak stays below 4 parts (before: above twice the shard — the pieces, then their join)."""
    url = f"{s3_bucket[0]}/ds"
    rng = np.random.default_rng(0)
    samples = [rng.integers(0, 256, MiB, dtype=np.uint8) for _ in range(4)]
    writer = sk.ShardWriter(url, shard_size="64MiB", storage_options=s3_bucket[1])
    writer.store.part_bytes = PART
    tracemalloc.start()
    try:
        with writer:
            for i in range(40):
                writer.write({"id": i, "blob": samples[i % 4]})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * PART, f"peak {peak / MiB:.1f} MiB"
    dataset = open_dataset(url, s3_bucket[1])
    assert len(dataset.manifest.shards) == 1 and dataset.manifest.num_samples == 40
    assert [s["id"] for s in dataset.samples()] == list(range(40))
