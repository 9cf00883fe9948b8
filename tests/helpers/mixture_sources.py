"""Three small token datasets written to one S3 bucket, the sources of the S3 mixture tests."""

from __future__ import annotations

from typing import Any

import numpy as np

import shardkit as sk

SOURCES = {"web": (300, 0.6), "code": (120, 0.3), "math": (30, 0.1)}  # name: (samples, weight)


def write_sources(bucket_url: str, storage_options: dict[str, Any]) -> dict[str, str]:
    """Write every source under ``bucket_url``; its URL by name."""
    urls = {}
    for offset, (name, (size, _)) in enumerate(SOURCES.items()):
        url = f"{bucket_url}/{name}"
        rng = np.random.default_rng(offset)
        with sk.ShardWriter(url, shard_size="4KiB", block_size="1KiB", storage_options=storage_options) as writer:
            for i in range(size):
                writer.write({"id": i, "tokens": rng.integers(0, 1000, int(rng.integers(8, 64)), dtype=np.int32)})
        urls[name] = url
    return urls
