"""shardkit reading a 4-source mixture of the tokens corpus (``run_all``'s ``mixture`` kind).

The tokens source of ``data.py`` is cut by sample index into four shardkit data sets of
70 / 15 / 10 / 5 % (the shares of ``benchmarks/mixture_read.py``), each packed like the
``shardkit`` configuration, and read back as ``sk.Mixture`` of those four sources, weights
equal to their sizes and ``samples_per_epoch`` their sum, so one epoch delivers every
sample of the corpus once and the same digest check as a single data set applies. Two
configurations: ``composition="random"`` and ``"stratified"``. The yardstick is the same
corpus read as one data set (the ``tokens`` kind) by every library.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.data import Source
from benchmarks.peers.shardkit import SHARD_SIZE, ZSTD_LEVEL, ShardkitPeer

SHARES = {"web": 0.70, "code": 0.15, "books": 0.10, "math": 0.05}


def split(num_samples: int) -> dict[str, range]:
    """Consecutive index ranges of the four sources (the last takes the remainder)."""
    ranges, first = {}, 0
    names = list(SHARES)
    for name in names:
        count = num_samples - first if name == names[-1] else int(num_samples * SHARES[name])
        ranges[name] = range(first, first + count)
        first += count
    return ranges


class ShardkitMixturePeer(ShardkitPeer):
    """``shardkit-mix-<composition>``: only for the tokens corpus."""

    def __init__(self, composition: str) -> None:
        self.composition = composition
        self.name = f"shardkit-mix-{composition}"

    def _pack(self, source: Source, out_dir: Path) -> None:
        import shardkit as sk

        for name, indices in split(source.num_samples).items():
            with sk.ShardWriter(str(out_dir / name), shard_size=SHARD_SIZE, level=ZSTD_LEVEL) as writer:
                for index in indices:
                    writer.write(source.sample(index))

    def loader(self, url: str, kind: str, num_workers: int, batch_size: int) -> Iterable[Any]:
        import shardkit as sk

        names = sorted(p.name for p in Path(url).iterdir() if p.is_dir())
        sizes = {name: sk.open_dataset(str(Path(url) / name)).manifest.num_samples for name in names}
        sources = [sk.Source(str(Path(url) / name), sizes[name], name) for name in names]
        mixture = sk.Mixture(sources, samples_per_epoch=sum(sizes.values()), composition=self.composition)
        dataset = sk.StreamingDataset(mixture, batch_size=batch_size, shuffle=False)
        return sk.ShardLoader(dataset, num_workers=num_workers)
