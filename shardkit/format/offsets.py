"""Offsets from lengths: where item ``i`` of a ragged sequence starts, the one way they are made."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def offsets_from_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """int64 ``(n + 1,)``: 0, then the running sums of ``lengths``; item ``i`` spans
    ``[offsets[i], offsets[i + 1])``."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets
