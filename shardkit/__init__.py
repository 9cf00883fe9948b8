"""shardkit: sharded, checksummed datasets and an exactly-once, resumable PyTorch reader.

Torch-only names (``StreamingDataset``, ``ShardLoader``, …) are imported lazily so that the
format, the writer and the CLI work without importing torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

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
    "Mixture": "shardkit.read.mixture",
    "MixtureDataset": "shardkit.loader.mixture_dataset",
    "Source": "shardkit.read.mixture",
    "load_mixture": "shardkit.read.mixture",
}

__all__ = sorted(["__version__", *_LAZY])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'shardkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
