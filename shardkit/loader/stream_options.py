"""``StreamOptions``: what a ``StreamingDataset`` reads and how, besides its plan parameters —
the node cache (specs/cache.md K47: ``$SHARDKIT_CACHE_DIR``, else ``~/.cache/shardkit``, for a
remote dataset), ``with_index`` and the data-parallel rank (specs/partition.md P22-P26)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from shardkit.loader.data_parallel import as_data_parallel
from shardkit.loader.env import cache_settings
from shardkit.read.dataset import split_manifest_path
from shardkit.storage import split_protocol


@dataclass(frozen=True)
class StreamOptions:
    """What to read and how (everything but the plan parameters)."""

    with_index: bool = False
    cache_dir: str | None = None
    cache_limit: int = 200 << 30
    storage_options: dict[str, Any] | None = None
    rank: int | None = None  # the data-parallel rank and size (data_parallel=), else read at __iter__
    world_size: int | None = None
    reads: bool = True  # False: a rank that needs no data (DataParallel(reads=False), P26)
    remote: bool = False  # some dataset read is not a local folder (its manifest is cached too, K18)


def stream_options(urls: Sequence[str], with_index: bool, cache_dir: str | bool | None, cache_limit: int | str | None,
                   storage_options: dict[str, Any] | None, data_parallel: Any) -> StreamOptions:
    """The options of a dataset reading ``urls`` (one, or a mixture's sources); the data-parallel
    group is resolved here, once, to ints (nothing unpicklable reaches a worker)."""
    remote = any(split_protocol(split_manifest_path(str(url)))[0] != "file" for url in urls)
    directory, limit = cache_settings(cache_dir, cache_limit, remote=remote)  # K47: loader/env.py
    options = StreamOptions(with_index=with_index, cache_dir=directory, cache_limit=limit,
                            storage_options=storage_options, remote=remote)
    if data_parallel is not None:
        dp = as_data_parallel(data_parallel).resolve()
        options = replace(options, rank=dp.rank, world_size=dp.size, reads=dp.reads)
    return options
