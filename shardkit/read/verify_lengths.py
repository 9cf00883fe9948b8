"""Verify a dataset's per-sample length indexes (specs/manifest.md M11): each file's size and
xxh64 against its manifest entry, and (unless ``quick``) every length against the samples.

The full check reads the shards' blocks again (a column block's lengths are its row offsets,
so that costs the blocks' reads and decompression, no sample decoding).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shardkit.errors import ShardkitError, StorageError
from shardkit.format.length_index import LengthsInfo, decode_lengths
from shardkit.read.dataset import StoredDataset
from shardkit.read.tokens.lengths import shard_lengths

Fail = Callable[[str, "int | None"], None]  # a report's ``fail(message, first_bad_sample)``


def check_length_index(dataset: StoredDataset, info: LengthsInfo, fail: Fail, quick: bool = False) -> None:
    """Check one length index file, calling ``fail`` for what is wrong."""
    url = dataset.store.url_of(info.name)
    try:
        lengths = decode_lengths(dataset.store.read(info.name), info, url)
    except (ShardkitError, StorageError, OSError) as exc:
        fail(str(exc) if url in str(exc) else f"{url}: cannot read: {exc}", None)
        return
    if not quick:
        _compare(dataset, info, lengths, fail)


def _compare(dataset: StoredDataset, info: LengthsInfo, lengths: np.ndarray, fail: Fail) -> None:
    url, start = dataset.store.url_of(info.name), 0
    for shard_index, shard in enumerate(dataset.manifest.shards):
        stop = start + shard.num_samples
        try:
            with dataset.open_shard(shard_index) as reader:
                found = shard_lengths(reader, info.field)
        except (ShardkitError, StorageError, OSError) as exc:
            fail(f"{url}: cannot check against shard {shard.name}: {exc}", None)
            return
        wrong = np.flatnonzero(found != lengths[start:stop].astype(np.int64))
        if len(wrong):
            sample = int(wrong[0])
            fail(
                f"{url}: sample {start + sample} (shard {shard.name}, sample {sample}): index says "
                f"{int(lengths[start + sample])} tokens of {info.field!r}, the sample holds {int(found[sample])}",
                start + sample,
            )
            return
        start = stop
