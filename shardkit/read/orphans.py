"""Files under a dataset folder that its manifest does not name (``shardkit verify``, W5).

A writer removes what it leaves behind (shard-format.md W2, W5), so such files are the remains
of a writer killed at a bad moment, or someone else's. They cost space and confuse people, but
they never change what a reader reads: verify reports them as a warning (``--strict``: an
error).
"""

from __future__ import annotations

from shardkit.format import MANIFEST_NAME
from shardkit.format.manifest_companion import COMPANION_NAME
from shardkit.read.dataset import StoredDataset


def unnamed_files(dataset: StoredDataset) -> list[str]:
    """Names (relative to the dataset folder, sorted) of files the manifest does not name."""
    manifest = dataset.manifest
    named = {info.name for info in manifest.shards} | {entry.name for entry in manifest.lengths}
    named.update((MANIFEST_NAME, COMPANION_NAME))
    return [name for name in dataset.store.list("") if name not in named]
