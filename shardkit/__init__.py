"""shardkit: sharded, checksummed datasets and an exactly-once, resumable PyTorch reader.

Torch-only names (``StreamingDataset``, ``ShardLoader``, …) are imported lazily so that the
format, the writer and the CLI work without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from shardkit.format import Manifest
    from shardkit.loader import DevicePrefetcher, Ragged, ShardLoader, StreamingDataset
    from shardkit.loader.data_parallel import DataParallel
    from shardkit.loader.transforms import SampleContext
    from shardkit.plan import sample_rng
    from shardkit.plan.tokens.config import TokenBlocks
    from shardkit.read import ShardReader, open_dataset
    from shardkit.read.field_values import field_values
    from shardkit.read.mixture.config import Mixture, Source, load_mixture
    from shardkit.write import ShardWriter
    from shardkit.write.map import pack

_LAZY = {
    "ShardReader": "shardkit.read",
    "ShardWriter": "shardkit.write",
    "Manifest": "shardkit.format",
    "open_dataset": "shardkit.read",
    "pack": "shardkit.write.map",
    "sample_rng": "shardkit.plan",
    "StreamingDataset": "shardkit.loader",
    "ShardLoader": "shardkit.loader",
    "Ragged": "shardkit.loader",
    "DevicePrefetcher": "shardkit.loader",
    "DataParallel": "shardkit.loader.data_parallel",  # specs/partition.md P22-P26
    "Mixture": "shardkit.read.mixture.config",
    "SampleContext": "shardkit.loader.transforms",
    "Source": "shardkit.read.mixture.config",
    "load_mixture": "shardkit.read.mixture.config",
    "field_values": "shardkit.read.field_values",
    "TokenBlocks": "shardkit.plan.tokens.config",
}

__all__ = [
    "DataParallel",
    "DevicePrefetcher",
    "Manifest",
    "Mixture",
    "Ragged",
    "SampleContext",
    "ShardLoader",
    "ShardReader",
    "ShardWriter",
    "Source",
    "StreamingDataset",
    "TokenBlocks",
    "__version__",
    "field_values",
    "load_mixture",
    "open_dataset",
    "pack",
    "sample_rng",
]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'shardkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
