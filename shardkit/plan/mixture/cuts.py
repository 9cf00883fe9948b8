"""Per-source counts of many cut ``random`` windows at once (specs/mixture.md MX16).

A ``random`` window's order is the stable ``argsort`` of its Philox raw stream (the sources'
samples in blocks, source after source), so the samples of source ``i`` among its first ``t``
outputs are block ``i``'s values below the stream's ``t``-th smallest. Counting that needs
every value of the stream but no order: the stream is uniform over 64 bits, so the ``t``-th
smallest lies near ``t / length`` of the range. The values below a band of about 3 standard
deviations of that count around there are counted per block, and only the few inside it are
sorted to place the ``t``-th one. When the band misses it, or values tie at it, the window is
counted from the exact mask of :func:`first_of_permutation` instead: exact either way, the
band only sets the cost. Windows go 16 at a time through each pass (1 MiB of stream at
8,192-sample windows).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardkit.plan.rng import first_of_permutation, raw_stream

CHUNK = 16
_WORD = (1 << 64) - 1


def first_counts(keys: Sequence[int], sizes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Row ``j``: per block of ``raw_stream(keys[j], sizes[j].sum())`` (blocks of ``sizes[j]``
    consecutive values), how many of its indices come among the first ``counts[j]`` of the
    stream's stable ``argsort``. O(total stream length), no sort of a stream."""
    sizes = np.asarray(sizes, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    lengths = sizes.sum(axis=1)
    found = np.where((counts >= lengths)[:, None], sizes, 0)
    todo = np.flatnonzero((counts > 0) & (counts < lengths))
    for length in np.unique(lengths[todo]).tolist():
        rows = todo[lengths[todo] == length]
        for a in range(0, len(rows), CHUNK):
            chunk = rows[a:a + CHUNK]
            raw = np.stack([raw_stream(keys[j], length) for j in chunk.tolist()])
            found[chunk] = first_counts_of(raw, sizes[chunk], counts[chunk])
    return found


def first_counts_of(raw: np.ndarray, sizes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """:func:`first_counts` of the raw streams ``raw`` (one per row; ``0 < counts < width``):
    exact for any values, ties included; fast for uniform ones."""
    m, width = raw.shape
    spread = 3 * np.sqrt(counts * (width - counts) / width).astype(np.int64) + 8  # ~3 standard deviations
    lo = _scaled(np.maximum(counts - spread, 0) / width)
    hi = _scaled(np.minimum(counts + spread, width) / width)
    starts = (np.cumsum(sizes, axis=1) - sizes + np.arange(m)[:, None] * width).reshape(-1)
    filled = np.flatnonzero(sizes.reshape(-1))  # reduceat wants strictly rising starts
    found = np.zeros(sizes.size, dtype=np.int64)
    below = raw < lo[:, None]
    found[filled] = np.add.reduceat(below.reshape(-1).view(np.uint8), starts[filled], dtype=np.int32)
    inside = np.flatnonzero((raw <= hi[:, None]) ^ below)  # lo <= raw <= hi
    row = inside // width
    need = counts - found.reshape(m, -1).sum(axis=1)
    per_row = np.bincount(row, minlength=m)
    exact = (need > 0) & (need <= per_row)
    if exact.any():
        values = raw.reshape(-1)[inside]
        band = np.full((m, int(per_row.max())), _WORD, dtype=np.uint64)
        band[row, np.arange(len(row)) - (np.cumsum(per_row) - per_row)[row]] = values
        band.sort(axis=1)
        last = band[np.arange(m), np.clip(need - 1, 0, band.shape[1] - 1)]
        taken = values <= last[row]
        exact &= np.bincount(row[taken], minlength=m) == need  # no tie at the last value taken
        # a position's block: the last start at or before it
        found += np.bincount(np.searchsorted(starts, inside[taken], side="right") - 1, minlength=sizes.size)
    result = found.reshape(m, -1)
    for j in np.flatnonzero(~exact).tolist():
        mask = first_of_permutation(raw[j], int(counts[j]))
        result[j] = np.bincount(np.repeat(np.arange(sizes.shape[1]), sizes[j])[mask], minlength=sizes.shape[1])
    return result


def _scaled(fractions: np.ndarray) -> np.ndarray:
    """``fractions`` of the 64-bit range, roughly (any band is exact: it only sets the cost)."""
    scaled: np.ndarray = np.minimum(fractions * 2.0**64, 2.0**64 - 2048).astype(np.uint64)
    return scaled
