"""The cutter states token-block consumers report with their batches, kept at the consumed
boundary (specs/token-blocks.md TB28).

Each token batch's ``BatchMeta`` carries its consumer's cutter state after it as ints
(``cursor``). ``CursorBook`` keeps the last few per consumer, by position, so ``state_dict()``
(at the boundary, or at an earlier snapshot's) takes each consumer's state from what it
reported instead of recomputing it; ``gather`` gives every rank every consumer's, collective
when ``torch.distributed`` is initialized (two int64 all-gathers, the rows padded to one
length; loader/replicas.py checks the replicas agree). A consumer with no report at its
offset (none received yet) is left out and computed as before.
"""

from __future__ import annotations

from typing import Any

from shardkit.loader.replicas import gather_by_dp_rank
from shardkit.loader.topology import Topology
from shardkit.loader.transfer.meta import BatchMeta
from shardkit.plan.tokens.cursor import cursor_state, row_length

KEPT = 4  # reports kept per consumer: a snapshot a few batches behind the boundary still finds its own


class CursorBook:
    """Per consumer, the cutter states it reported, by position (blocks consumed)."""

    def __init__(self) -> None:
        self._rows: dict[int, dict[int, tuple[int, ...]]] = {}

    def clear(self) -> None:
        self._rows = {}

    def record(self, meta: BatchMeta) -> None:
        """``meta``'s cutter state at its position (a token batch's: ``meta.cursor`` is not empty)."""
        rows = self._rows.setdefault(meta.consumer, {})
        rows[meta.position] = meta.cursor
        if len(rows) > KEPT:
            rows.pop(next(iter(rows)))

    def at(self, consumer: int, position: int) -> tuple[int, ...] | None:
        """What ``consumer`` reported at ``position``, if it did."""
        return self._rows.get(consumer, {}).get(position)

    def state(self, consumer: int, position: int) -> dict[str, Any] | None:
        """The cutter state ``consumer`` reported at ``position``, if it did (TB28)."""
        row = self.at(consumer, position)
        return None if row is None else cursor_state(row)

    def gather(self, offsets: list[int], topology: Topology, num_workers: int,
               reads: bool) -> dict[int, dict[str, Any]]:
        """Every consumer's reported state at ``offsets`` (the global boundary) that some rank
        has: this rank's consumers' rows, gathered (collective when distributed, G5)."""
        width = max(num_workers, 1)
        lo = topology.rank * width
        row: list[int] = []
        for consumer in range(lo, min(lo + width, len(offsets))):
            found = self.at(consumer, offsets[consumer])
            row.extend([1, *found] if found is not None else [0])
        longest = max(r[0] for r in gather_by_dp_rank([len(row)], topology, reads, "token cursor lengths"))
        rows = gather_by_dp_rank(row + [0] * (longest - len(row)), topology, reads, "token cursors")
        known: dict[int, dict[str, Any]] = {}
        for rank, values in enumerate(rows):
            at = 0
            for consumer in range(rank * width, min((rank + 1) * width, len(offsets))):
                flag, at = values[at], at + 1
                if flag:
                    size = row_length(values[at:])
                    known[consumer] = cursor_state(values[at:at + size])
                    at += size
        return known
