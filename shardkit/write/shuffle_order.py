"""The pack-time shuffle order: a key per sample (specs/pack-shuffle.md PS1).

Sample ``i`` (its position among the encoded samples, in source order) gets
``sort_keys(seed, i)``, a keyed bijection of ``i`` onto 64-bit integers; the dataset is the
samples sorted by key. The keys are distinct, so any sort by them gives the same order (PS2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardkit.plan.rng import philox_key
from shardkit.units import parse_size

SALT_PACK_SHUFFLE = 4  # after the plan's salts 1-3 (specs/partition.md, "RNG keys")
METHOD = "sort-by-key-v1"
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class ShuffleOptions:
    """How ``pack`` shuffles: ``seed`` picks the order, ``memory`` bounds the samples held,
    ``tmp_dir`` holds the bucket files (default: the system temp folder)."""

    seed: int = 0
    memory: int | str = "256MiB"
    tmp_dir: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"shuffle seed: expected an int >= 0, got {self.seed!r}")
        if parse_size(self.memory) < 1:
            raise ValueError(f"shuffle memory: expected a size >= 1 byte, got {self.memory!r}")

    def describe(self) -> dict[str, Any]:
        """The manifest's ``order`` object for a dataset packed with these options (M9)."""
        return {"shuffled": True, "method": METHOD, "seed": self.seed}


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, a bijection of uint64 (each step is invertible)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def sort_keys(seed: int, start: int, count: int) -> np.ndarray:
    """Keys of samples ``start … start + count - 1``: distinct uint64s, a pure function of
    ``(seed, index)`` (PS1)."""
    words = philox_key(SALT_PACK_SHUFFLE, seed)
    offset, salt = np.uint64(words & _MASK64), np.uint64(words >> 64)
    x = np.arange(start, start + count, dtype=np.uint64)
    x += offset  # wraps modulo 2**64 (array arithmetic never warns)
    x = _mix(x)
    x ^= salt
    return _mix(x)
