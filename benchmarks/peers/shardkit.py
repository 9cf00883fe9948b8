"""shardkit itself: ShardWriter + StreamingDataset + ShardLoader.

Written against the public surface (README.md) fixed before shardkit's implementation
existed. What it assumes (checked only once shardkit is importable; if not, the harness
reports ``shardkit`` as unavailable and runs the peers alone):

* ``sk.ShardWriter(dir, shard_size="64MiB", level=3)`` is a context manager with
  ``write(dict)``; it takes numpy int32 arrays, ``int`` and ``bytes`` values.
* ``sk.StreamingDataset(dir, batch_size=64, shuffle=False)``; with the default tail policy
  no sample is dropped when the sample count is a multiple of ``batch_size × consumers``
  (data.py makes counts multiples of 256 for that reason). A dropped or padded sample fails
  the digest check, on purpose.
* ``sk.ShardLoader(ds, num_workers=W)`` is iterable (a torch DataLoader) and yields one
  dict per batch: ``batch["id"]`` a 1-D integer tensor/array (or list), and array / bytes
  fields as an object with ``.values`` (flat tensor/array) and ``.offsets`` (len + 1).
  Plain lists of per-sample arrays or bytes are accepted too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.checksum import Digest
from benchmarks.data import Source
from benchmarks.peers import Peer

SHARD_SIZE = "64MiB"
ZSTD_LEVEL = 3


def to_numpy(value: Any) -> np.ndarray:
    """A tensor (CPU), array or sequence as a numpy array, without copying where possible."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return value.numpy()
    return np.asarray(value)


class ShardkitPeer(Peer):
    name = "shardkit"
    module = "shardkit"
    distribution = "shardkit"

    def unavailable_reason(self) -> str | None:
        reason = super().unavailable_reason()
        if reason is not None:
            return reason
        import shardkit as sk

        names = ("ShardWriter", "StreamingDataset", "ShardLoader")
        missing = [name for name in names if not hasattr(sk, name)]
        if missing:
            return f"shardkit {self.version()} does not export {', '.join(missing)} yet"
        return None

    def _pack(self, source: Source, out_dir: Path) -> None:
        import shardkit as sk

        with sk.ShardWriter(str(out_dir), shard_size=SHARD_SIZE, level=ZSTD_LEVEL) as writer:
            for index in source.iter_indices():
                writer.write(source.sample(index))

    def loader(self, url: str, kind: str, num_workers: int, batch_size: int) -> Iterable[Any]:
        import shardkit as sk

        dataset = sk.StreamingDataset(url, batch_size=batch_size, shuffle=False)
        return sk.ShardLoader(dataset, num_workers=num_workers)

    def digest_batch(self, batch: Any, kind: str, digest: Digest) -> None:
        field = "tokens" if kind == "tokens" else "jpg"
        ids = to_numpy(batch["id"])
        column = batch[field]
        if hasattr(column, "values") and hasattr(column, "offsets"):
            digest.add_ragged(ids, to_numpy(column.values), to_numpy(column.offsets))
            return
        for sample_id, payload in zip(ids.tolist(), column, strict=True):
            digest.add(sample_id, to_numpy(payload) if not isinstance(payload, bytes) else payload)


def shardkit_blocks(url: str) -> tuple[list[Any], Any]:
    """The stored blocks of a packed shardkit data set, for the raw-limit loop, and their decoder.

    Uses ``sk.open_dataset(url).open_shard(i).index.blocks`` (records with ``offset``,
    ``stored_size``, ``num_samples``, ``codec``: 0 raw, 1 zstd, ``layout``: 0 rows, 1 columns)
    and ``shardkit.format.decode_block(raw, num_samples, layout)``.
    """
    import shardkit as sk
    from benchmarks.raw import BlockRef
    from shardkit.format import decode_block

    dataset = sk.open_dataset(url)
    refs: list[BlockRef] = []
    for shard_index, info in enumerate(dataset.manifest.shards):
        path = str(Path(url) / info.name)
        reader = dataset.open_shard(shard_index)
        for block in reader.index.blocks:
            refs.append(
                BlockRef(path, int(block["offset"]), int(block["stored_size"]),
                         int(block["num_samples"]), int(block["codec"]), int(block["layout"]))
            )
        reader.close()
    return refs, lambda raw, ref: decode_block(raw, ref.num_samples, ref.layout)
