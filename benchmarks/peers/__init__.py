"""Readers and writers compared by the harness, one module per library.

Every adapter implements :class:`Peer`. ``PEERS`` lists the configurations in the order the
interleaved repetitions run them; adapters import their library lazily, so a missing one is
reported by :func:`Peer.unavailable_reason` and skipped rather than breaking the run.
"""

from __future__ import annotations

import abc
import importlib
import importlib.metadata
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.checksum import Digest
from benchmarks.data import Source


class Peer(abc.ABC):
    """One library in one configuration (e.g. litdata with zstd chunks)."""

    name: str  # config name in results, e.g. "litdata-zstd"
    module: str  # importable module that must exist
    distribution: str  # pip distribution whose version is reported

    def unavailable_reason(self) -> str | None:
        try:
            importlib.import_module(self.module)
        except Exception as exc:  # any import failure means "skip", with the reason
            return f"{type(exc).__name__}: {exc}"
        return None

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    def pack(self, source: Source, out_dir: Path) -> None:
        """Write every sample of ``source`` into an empty ``out_dir`` with one process."""
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        self._pack(source, out_dir)

    @abc.abstractmethod
    def _pack(self, source: Source, out_dir: Path) -> None: ...

    @abc.abstractmethod
    def loader(self, url: str, kind: str, num_workers: int, batch_size: int) -> Iterable[Any]:
        """The documented way to stream ``url`` through a torch DataLoader, unshuffled."""

    @abc.abstractmethod
    def digest_batch(self, batch: Any, kind: str, digest: Digest) -> None:
        """Add every sample of ``batch`` (as this library's loader yields it) to ``digest``."""


def as_buffer(value: Any) -> Any:
    """bytes, numpy arrays and CPU tensors as something ``memoryview`` accepts, no copy."""
    if isinstance(value, (bytes, bytearray, memoryview, np.ndarray)):
        return value
    if hasattr(value, "numpy"):  # torch.Tensor (DataLoader's default_convert makes these)
        return value.numpy()
    return np.asarray(value)


def list_collate(samples: list[Any]) -> list[Any]:
    """Keep a batch as a list: variable-length arrays can't be stacked by default_collate."""
    return samples


def digest_sample_dicts(batch: list[dict[str, Any]], kind: str, digest: Digest) -> None:
    field = "tokens" if kind == "tokens" else "jpg"
    for sample in batch:
        digest.add(int(sample["id"]), as_buffer(sample[field]))


def all_peers() -> list[Peer]:
    from benchmarks.peers.litdata import LitdataPeer
    from benchmarks.peers.mosaic import MosaicPeer
    from benchmarks.peers.shardkit import ShardkitPeer
    from benchmarks.peers.wds import WebDatasetPeer

    return [
        ShardkitPeer(),
        MosaicPeer(),
        LitdataPeer(compression="zstd"),
        LitdataPeer(compression=None),
        WebDatasetPeer(),
    ]


def mixture_peers() -> list[Peer]:
    """Configurations of the ``mixture`` kind only: the tokens corpus as 4 sources."""
    from benchmarks.peers.shardkit_mix import ShardkitMixturePeer

    return [ShardkitMixturePeer("random"), ShardkitMixturePeer("stratified")]


def get_peer(name: str) -> Peer:
    known = [*all_peers(), *mixture_peers()]
    for peer in known:
        if peer.name == name:
            return peer
    raise KeyError(f"unknown peer {name!r}; known: {[p.name for p in known]}")
