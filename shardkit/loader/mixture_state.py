"""The mixture part of a loader state, and per-source accounting at the consumed boundary
(specs/mixture.md MX8-MX10).

A mixture loader state is the loader state of one dataset plus a ``mixture`` key: the mixture
state of ``shardkit.plan.mixture.state`` *without* its ``plan`` (the loader's own ``plan`` is
that plan, fingerprinted with the epoch digest). ``{**state["mixture"], "plan": state["plan"]}``
is the plan layer's mixture state, so resuming through the loader is exactly ``resume_mixture``.

Per-source counts: a mixture batch carries ``SOURCES_KEY`` (a tuple of ints, its real samples
per source); :class:`SourceTally` takes it out where the loader records the consumed boundary (L1),
so it counts what the training loop received, never what workers prefetched.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from shardkit.errors import StateError
from shardkit.loader.transfer.meta import BatchMeta

SOURCES_KEY = "_shardkit_sources"
HISTORY = 256  # boundaries kept per consumer, for ``state_dict(snapshot)`` a few batches back


class SourceTally:
    """Per consumer: real samples per source the training loop received this iteration, and
    the recent ``(position, cumulative counts)`` boundaries (a snapshot may name one). With
    ``tokens``, each count vector holds samples per source, then tokens per source (MX13)."""

    def __init__(self, names: tuple[str, ...], tokens: bool = False) -> None:
        self.names, self.tokens = names, tokens
        # cumulative counts as tuples of Python ints: adding one batch's costs ~1 us, not ~5 (per step)
        # cumulative counts as int64 vectors: adding one batch's is one vector add (per step)
        self._history: dict[int, deque[tuple[int, np.ndarray]]] = {}
        self._zero = np.zeros(len(names) * (2 if tokens else 1), dtype=np.int64)

    def reset(self, start_offsets: list[int]) -> None:
        self._history = {c: deque([(start, self._zero)], maxlen=HISTORY) for c, start in enumerate(start_offsets)}

    def record(self, batch: Any, meta: BatchMeta | None) -> None:
        """Take ``SOURCES_KEY`` out of ``batch``; add it to ``meta.consumer``'s boundary."""
        counts = batch.pop(SOURCES_KEY, None) if isinstance(batch, dict) else None
        if counts is None or meta is None:
            return
        history = self._history.get(meta.consumer)
        if history is None:  # not one made (and dropped) per batch as setdefault's default
            history = self._history[meta.consumer] = deque([(0, self._zero)], maxlen=HISTORY)
        history.append((meta.position, history[-1][1] + counts))

    def at(self, consumed: dict[int, int]) -> np.ndarray:
        """Samples per source received up to the boundary ``consumed`` (consumer -> position)."""
        total = np.zeros(len(self._zero), dtype=np.int64)
        for consumer, position in consumed.items():
            for seen, counts in reversed(self._history.get(consumer, ())):
                if seen == position:
                    total += counts
                    break
            else:
                raise StateError(f"consumer {consumer}: no per-source count at position {position} "
                                 f"(a snapshot more than {HISTORY} batches old?)")
        return total

    def summary(self) -> dict[str, Any]:
        """Samples received per source; ``{"samples": n, "tokens": k}`` per source with tokens."""
        latest = sum((h[-1][1] for h in self._history.values()), np.zeros(len(self._zero), dtype=np.int64))
        n = len(self.names)
        if self.tokens:
            return {name: {"samples": int(latest[i]), "tokens": int(latest[n + i])}
                    for i, name in enumerate(self.names)}
        return {name: int(c) for name, c in zip(self.names, latest, strict=True)}


class BatchTallies:
    """The ``SOURCES_KEY`` tuples of a consumer's batches, counted a window at a time as the
    reader yields them (one searchsorted and one bincount per window, not per batch).

    ``ends``: the plan's first global sample of each source after the first; ``order``: this
    mixture's index of each plan source (None: the same); ``lengths``: tokens per sample of each
    source of this mixture (weights in tokens, MX13). Batches are every ``batch_size`` samples
    of what :meth:`add` saw, in order, as ``cut_batches`` cuts them; :meth:`take` hands out the
    next batch's counts (real samples per source, then tokens per source with ``lengths``), an
    int64 vector: a row of its window's counts, added to the boundary with one vector add."""

    def __init__(self, ends: np.ndarray, order: np.ndarray | None, num_sources: int, batch_size: int,
                 lengths: tuple[np.ndarray, ...] | None = None) -> None:
        self.ends, self.order, self.n, self.batch = ends, order, num_sources, batch_size
        self.bases = np.concatenate([np.zeros(1, dtype=np.int64), ends])
        self.lengths = lengths
        self.ready: deque[np.ndarray] = deque()
        self.carry = np.zeros(num_sources * (2 if lengths is not None else 1), dtype=np.int64)
        self.filled = 0  # samples of the batch being filled
        self._lookup = _BucketLookup.of(ends)

    def add(self, indices: np.ndarray, padded: np.ndarray) -> None:
        """Count the next ``indices`` (global plan indices; ``padded``: pads, not counted)."""
        in_plan = (np.searchsorted(self.ends, indices, side="right") if self._lookup is None
                   else self._lookup.find(indices))
        sources = in_plan if self.order is None else self.order[in_plan]
        batch_of = (np.arange(self.filled, self.filled + len(indices), dtype=np.int64) // self.batch)
        keys = batch_of * self.n + sources
        real = ~np.asarray(padded, dtype=bool)
        if not real.all():
            keys, sources, indices, in_plan = keys[real], sources[real], indices[real], in_plan[real]
        full = (self.filled + len(real)) // self.batch  # batches this piece completes
        size = (full + 1) * self.n
        rows = np.bincount(keys, minlength=size).reshape(full + 1, self.n)
        if self.lengths is not None:
            local, tokens = indices - self.bases[in_plan], np.zeros(len(indices), dtype=np.int64)
            for source in np.unique(sources).tolist():  # by source, not by sample
                mine = sources == source
                tokens[mine] = self.lengths[source][local[mine]]
            weights = np.bincount(keys, weights=tokens, minlength=size).astype(np.int64)
            rows = np.concatenate([rows, weights.reshape(full + 1, self.n)], axis=1)
        rows[0] += self.carry
        rows.flags.writeable = False  # rows travel in batches; the carry is a copy
        self.ready.extend(rows[:full])
        self.carry = rows[full].copy()
        self.filled = (self.filled + len(real)) % self.batch

    def take(self) -> np.ndarray:
        return self.ready.popleft()


class _BucketLookup:
    """``searchsorted(ends, indices, side="right")`` for unsorted ``indices`` by table: buckets
    of ``2**shift`` indices, no wider than the shortest non-empty source, so each holds at most
    one change of source; per bucket the source at its start, the index where it changes and
    the source after (8,192 shuffled indices over 64 sources: 357 µs by binary search, 111 by table)."""

    MAX_BUCKETS = 1 << 22

    def __init__(self, shift: int, low: np.ndarray, cut: np.ndarray, high: np.ndarray) -> None:
        self.shift, self.low, self.cut, self.high = shift, low, cut, high

    @classmethod
    def of(cls, ends: np.ndarray) -> _BucketLookup | None:
        """The table of ``ends`` (ascending), or None where it would be too large."""
        if not len(ends):
            return None
        gaps = np.diff(np.concatenate([np.zeros(1, dtype=np.int64), ends]))
        shortest = int(gaps[gaps > 0].min()) if (gaps > 0).any() else 1
        shift = shortest.bit_length() - 1  # 2**shift <= shortest
        buckets = (int(ends[-1]) >> shift) + 2
        if buckets > cls.MAX_BUCKETS:
            return None
        starts = np.arange(buckets, dtype=np.int64) << shift
        low = np.searchsorted(ends, starts, side="right")
        nxt = np.minimum(low, len(ends) - 1)  # the first end past the bucket's start, if any
        cut = np.where(low < len(ends), ends[nxt], np.iinfo(np.int64).max)
        high = np.searchsorted(ends, cut, side="right")
        return cls(shift, low, cut, high)

    def find(self, indices: np.ndarray) -> np.ndarray:
        bucket = np.minimum(indices >> self.shift, len(self.low) - 1)
        found: np.ndarray = np.where(indices >= self.cut[bucket], self.high[bucket], self.low[bucket])
        return found


def with_consumed(part: dict[str, Any], consumed: np.ndarray,
                  tokens: np.ndarray | None = None) -> dict[str, Any]:
    """The ``mixture`` part with each source's ``consumed`` (and ``consumed_tokens``) set (MX9)."""
    sources = [dict(entry, consumed=int(n)) for entry, n in zip(part["sources"], consumed, strict=True)]
    if tokens is not None:
        sources = [dict(entry, consumed_tokens=int(k)) for entry, k in zip(sources, tokens, strict=True)]
    return dict(part, sources=sources)


def mixture_of(part: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """The plan layer's mixture state of a loader state's ``mixture`` part and ``plan`` (None
    for a state without the part)."""
    if part is None:
        return None
    if not isinstance(part, dict) or "plan" in part:
        raise StateError("loader state: 'mixture' must be a mixture state without its 'plan'")
    return {**part, "plan": plan}
