"""litdata: ``optimize`` (zstd or uncompressed chunks) + StreamingDataset + StreamingDataLoader.

Packing uses ``litdata.optimize`` as documented, with ``num_workers=1`` (one writer process;
litdata still starts it as a child of the caller) and ``chunk_bytes="64MB"``. Token arrays go
through litdata's ``numpy`` serializer, image bytes through ``bytes``. Reading uses litdata's
own ``StreamingDataLoader`` on the local folder; uncompressed chunks are memory-mapped by
litdata, zstd chunks are read and decompressed per chunk.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks import data
from benchmarks.checksum import Digest
from benchmarks.data import Source
from benchmarks.peers import Peer, digest_sample_dicts, list_collate

_SOURCES: dict[tuple[str, float, str], Source] = {}


def _sample(key: tuple[str, float, str], index: int) -> dict[str, Any]:
    """Runs in litdata's writer process: open the memory-mapped source once, by key."""
    if key not in _SOURCES:
        kind, scale, root = key
        _SOURCES[key] = data.load(kind, scale, Path(root).parent)
    return _SOURCES[key].sample(index)


class LitdataPeer(Peer):
    module = "litdata"
    distribution = "litdata"

    def __init__(self, compression: str | None) -> None:
        self.compression = compression
        self.name = f"litdata-{compression or 'none'}"

    def _pack(self, source: Source, out_dir: Path) -> None:
        import litdata

        key = (source.kind, float(source.meta["scale"]), str(source.root.resolve()))
        litdata.optimize(
            fn=functools.partial(_sample, key),
            inputs=list(range(source.num_samples)),
            output_dir=str(out_dir.resolve()),
            chunk_bytes="64MB",
            compression=self.compression,
            num_workers=1,
        )

    def loader(self, url: str, kind: str, num_workers: int, batch_size: int) -> Iterable[Any]:
        import litdata

        dataset = litdata.StreamingDataset(str(Path(url).resolve()), shuffle=False)
        return litdata.StreamingDataLoader(
            dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=list_collate
        )

    def digest_batch(self, batch: Any, kind: str, digest: Digest) -> None:
        digest_sample_dicts(batch, kind, digest)
