"""webdataset: ShardWriter tars + WebDataset pipeline batched in the workers + WebLoader.

The documented recipe for training: plain ``.tar`` shards of at most 64 MiB, token arrays
stored as ``.npy`` (decoded with ``.decode()``), image bytes as ``.jpg`` left undecoded;
``.batched(64)`` inside the dataset so workers ship whole batches, and
``WebLoader(batch_size=None)`` (whose default_convert turns the arrays into
tensors). Shards are split across workers by webdataset's default
``split_by_worker``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.checksum import Digest
from benchmarks.data import Source
from benchmarks.peers import Peer, as_buffer, list_collate

FIELDS = {"tokens": "npy", "images": "jpg"}


class WebDatasetPeer(Peer):
    name = "webdataset"
    module = "webdataset"
    distribution = "webdataset"

    def _pack(self, source: Source, out_dir: Path) -> None:
        import webdataset as wds

        out_dir.mkdir(parents=True)
        pattern = str(out_dir / "shard-%06d.tar")
        with wds.ShardWriter(pattern, maxsize=1 << 26, verbose=0) as writer:
            for index in source.iter_indices():
                sample = source.sample(index)
                record: dict[str, Any] = {"__key__": f"{index:010d}"}
                if source.kind == "tokens":
                    record["npy"] = sample["tokens"]
                else:
                    record["jpg"] = sample["jpg"]
                    record["cls"] = sample["label"]
                writer.write(record)

    def loader(self, url: str, kind: str, num_workers: int, batch_size: int) -> Iterable[Any]:
        import webdataset as wds

        urls = sorted(str(p) for p in Path(url).glob("shard-*.tar"))
        dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        if kind == "tokens":
            dataset = dataset.decode()
        dataset = dataset.to_tuple("__key__", FIELDS[kind]).batched(
            batch_size, collation_fn=list_collate
        )
        return wds.WebLoader(dataset, batch_size=None, num_workers=num_workers)

    def digest_batch(self, batch: Any, kind: str, digest: Digest) -> None:
        for key, payload in batch:
            digest.add(int(key), as_buffer(payload))
