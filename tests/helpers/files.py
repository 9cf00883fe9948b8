"""File-tree helpers for tests."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def read_tree(folder: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, with its bytes (for byte-identity checks)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as fh:
                out[os.path.relpath(os.path.join(root, name), folder)] = fh.read()
    return out


def copy_into(store, folder: str | os.PathLike[str]) -> None:
    """Every file under ``folder`` written into ``store`` under its relative path (a dataset
    packed locally, as a remote store holds it)."""
    for relative, data in sorted(read_tree(folder).items()):
        store.write_atomic(relative.replace(os.sep, "/"), data)


def packed_in_memory(local: Path, count: int, shard_size: str, lengths: int) -> str:
    """``count`` samples (``id``, ``tokens`` of ``id % lengths`` int32s) packed locally at
    ``local`` into shards of ``shard_size``, then copied into a fresh memory:// store; its URL."""
    import numpy as np

    import shardkit as sk
    from shardkit.storage import open_store

    with sk.ShardWriter(str(local), shard_size=shard_size) as writer:
        for i in range(count):
            writer.write({"id": i, "tokens": np.arange(i % lengths, dtype=np.int32)})
    url = f"memory://ds-{uuid.uuid4().hex}"
    copy_into(open_store(url), local)
    return url
