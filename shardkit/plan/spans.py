"""What a consumer reads: spans of shards, grouped into windows with an output order.

A :class:`Window` is the unit the reader works in: decode ``spans`` in order (their samples
concatenated form the window's *decode list*), then emit ``decode_list[order[i]]`` for each i.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np


@dataclass(frozen=True, slots=True)
class Span:
    """Samples ``start:end`` of shard ``shard_index`` (manifest order); ``padded`` marks repeats."""

    shard_index: int
    start: int
    end: int
    padded: bool = False

    @property
    def num_samples(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, eq=False)
class Window:
    """A bounded group of samples: decode ``spans`` (concatenated), emit in ``order``.

    ``order`` holds int64 indices into the concatenation of ``spans``. It may select only part
    of the decode list (a window cut by a seek or a re-partition boundary); its length is the
    number of samples this window outputs.
    """

    spans: tuple[Span, ...]
    order: np.ndarray
    # Per output sample, which copy of its sample it is in a weighted epoch (specs/sample-weights.md
    # SW8); None: every sample is copy 0 (every other sequence).
    copies: np.ndarray | None = None

    @property
    def num_samples(self) -> int:
        """Samples this window outputs (``len(order)``)."""
        return len(self.order)

    @property
    def num_decoded(self) -> int:
        """Samples the reader decodes for this window (sum of span lengths)."""
        return sum(span.num_samples for span in self.spans)

    def padded_mask(self) -> np.ndarray:
        """Bool per output sample: True where the sample is a pad repeat (G3 in docs/guarantees.md)."""
        flags = np.repeat(
            np.array([span.padded for span in self.spans], dtype=bool),
            [span.num_samples for span in self.spans],
        )
        mask: np.ndarray = flags[self.order]
        return mask

    def global_indices(self, offsets: np.ndarray) -> np.ndarray:
        """Manifest-order global sample index per output sample; ``offsets`` from shard_offsets."""
        parts = [offsets[s.shard_index] + np.arange(s.start, s.end) for s in self.spans]
        decoded = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        indices: np.ndarray = decoded.astype(np.int64, copy=False)[self.order]
        return indices


# Samples per shard in manifest order: a list of ints or a 1-D integer array.
ShardSizes: TypeAlias = Sequence[int] | np.ndarray


def shard_offsets(shard_sizes: ShardSizes) -> np.ndarray:
    """Samples in shards before each shard, manifest order: ``[0, s0, s0+s1, ...]`` (len S+1)."""
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    return np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(sizes, dtype=np.int64)])


def global_index(offsets: np.ndarray, span: Span, i: int) -> int:
    """Global index of the ``i``-th sample of ``span``: samples before its shard + position."""
    return int(offsets[span.shard_index]) + span.start + i


# A run of ranks decoded: spans, per rank its index into their samples and its copy number
# (``None`` for the index: one sample per rank in span order, unweighted; ``None`` for the copies:
# all 0. A weighted mixture source has both, MX17; an unweighted one repeating a pass, copies, MX2).
Decoded = tuple[list[Span], np.ndarray | None, np.ndarray | None]


def join_decoded(parts: Sequence[Decoded], ranks: Sequence[int]) -> Decoded:
    """``parts`` (of ``ranks[k]`` ranks each) one after another, as one :data:`Decoded`."""
    spans = [span for part in parts for span in part[0]]
    index: np.ndarray | None = None
    copies: np.ndarray | None = None
    if any(part[1] is not None for part in parts):
        found, base = [np.zeros(0, dtype=np.int64)], 0
        for (listed, where, _), count in zip(parts, ranks, strict=True):
            found.append(base + (np.arange(count, dtype=np.int64) if where is None else where))
            base += sum(span.num_samples for span in listed)
        index = np.concatenate(found)
    if any(part[2] is not None for part in parts):
        copies = np.concatenate([np.zeros(0, dtype=np.int64)] + [
            np.zeros(count, dtype=np.int64) if copy is None else copy
            for (_, _, copy), count in zip(parts, ranks, strict=True)])
    return spans, index, copies
