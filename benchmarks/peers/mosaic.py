"""mosaicml-streaming: MDSWriter (zstd) + StreamingDataset + StreamingDataLoader.

Configured as its docs recommend for local data: ``local=`` points at the MDS folder with no
``remote``; shards are zstd-compressed (level 3, the ``"zstd"`` default) with the default
64 MiB ``size_limit``; the dataset is given the loader's ``batch_size`` (it partitions by
batch). On first read mosaic decompresses each shard next to the compressed one and reuses it
afterwards — the harness's untimed warm-up pass pays that once.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.checksum import Digest
from benchmarks.data import Source
from benchmarks.peers import Peer, digest_sample_dicts, list_collate

COLUMNS = {
    "tokens": {"id": "int", "tokens": "ndarray:int32"},
    "images": {"id": "int", "jpg": "bytes", "label": "int"},
}


class MosaicPeer(Peer):
    name = "mosaic"
    module = "streaming"
    distribution = "mosaicml-streaming"

    def _pack(self, source: Source, out_dir: Path) -> None:
        from streaming import MDSWriter

        with MDSWriter(
            out=str(out_dir),
            columns=COLUMNS[source.kind],
            compression="zstd",
            size_limit=1 << 26,
            progress_bar=False,
        ) as writer:
            for index in source.iter_indices():
                writer.write(source.sample(index))

    def loader(self, url: str, kind: str, num_workers: int, batch_size: int) -> Iterable[Any]:
        from streaming import StreamingDataLoader, StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        dataset = StreamingDataset(local=url, batch_size=batch_size, shuffle=False)
        return StreamingDataLoader(
            dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=list_collate
        )

    def digest_batch(self, batch: Any, kind: str, digest: Digest) -> None:
        digest_sample_dicts(batch, kind, digest)
