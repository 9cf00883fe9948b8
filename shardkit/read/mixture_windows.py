"""A mixture consumer's windows, each decoded while the one before it goes out (specs/mixture.md MX14).

A shuffled window is decoded whole before its first sample can go out (read/stream.py). For one
dataset every consumer's windows start at its own first position, so with DataLoader workers
all workers decode at the same steps, in parallel. A mixture's windows are the mixed sequence's
(MX5), and a consumer's range starts anywhere in one: each worker then stalls for a whole
window at its own steps, and the in-order loader waits for each stall in turn while the other
workers sit on full queues (measured: twice as many long waits per epoch at W=2, the loss
of T5 in benchmarks/README.md). :func:`spread_window_decodes` decodes the next shuffled window a
few blocks per ``piece`` of the current one, so a worker's output stays steady.

Same samples in the same order as ``read_window`` window by window; at most two windows are
held (the one going out and the next). A window whose order is a plain run streams block by
block anyway, and nothing is decoded ahead while it goes out (it still reads its readers).
Not thread-safe: one per consumer, like its opener.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import cast

import numpy as np

from shardkit.plan.spans import Window
from shardkit.read.column_pieces import is_run
from shardkit.read.options import ReadOptions
from shardkit.read.shard_reader import SampleChunk, ShardReader
from shardkit.read.stream import ShardOpener, WindowSamples, read_window


class _Decoded:
    """What ``read_window`` asks of an opener, answered from chunks decoded beforehand: one
    list of chunks per span, in span order (``read_window`` reads each span once, in order)."""

    def __init__(self, options: ReadOptions, spans: list[list[SampleChunk]]) -> None:
        self.options = options
        self._spans = deque(spans)

    def reader(self, shard_index: int) -> _Decoded:
        return self

    def sample_chunks(self, start: int, stop: int) -> Iterator[SampleChunk]:
        return iter(self._spans.popleft())


class _Upcoming:
    """A shuffled window decoded a few blocks at a time, span by span (one reader at a time, so
    the opener never closes a reader this window is still reading)."""

    def __init__(self, opener: ShardOpener, window: Window) -> None:
        self.opener, self.window = opener, window
        self.total, self.done = window.num_decoded, 0
        self._spans: list[list[SampleChunk]] = [[] for _ in window.spans]
        self._chunks = self._decode()

    def _decode(self) -> Iterator[tuple[int, SampleChunk]]:
        for i, span in enumerate(self.window.spans):
            reader: ShardReader = self.opener.reader(span.shard_index)
            for chunk in reader.sample_chunks(span.start, span.end):
                yield i, chunk

    def advance(self, samples: int) -> None:
        """Decode blocks until at least ``samples`` of the window's are decoded (or all are)."""
        while self.done < samples:
            found = next(self._chunks, None)
            if found is None:
                self.done = self.total
                return
            i, chunk = found
            self._spans[i].append(chunk)
            self.done += len(chunk)

    def samples(self, offsets: np.ndarray) -> WindowSamples:
        self.advance(self.total)
        decoded = _Decoded(self.opener.options, self._spans)
        return next(read_window(cast(ShardOpener, decoded), self.window, offsets))


def _pieces(window: WindowSamples, position: int, piece: int) -> Iterator[WindowSamples]:
    """``window`` cut where the consumer's position (``position`` at its first sample) reaches a
    multiple of ``piece``, so the batches cut from the pieces need no more joins than before."""
    first = 0
    while first < len(window.samples):
        last = min(first + piece - (position + first) % piece, len(window.samples))
        part = slice(first, last)
        copies = None if window.copies is None else window.copies[part]
        yield WindowSamples(window.samples[part], window.indices[part], window.padded[part], copies)
        first = last


def spread_window_decodes(opener: ShardOpener, windows: Iterator[Window], offsets: np.ndarray,
                          start: int, piece: int) -> Iterator[WindowSamples]:
    """``read_window`` over ``windows`` (a consumer's, from its position ``start``), each shuffled
    window decoded while the previous one goes out in pieces of up to ``piece`` samples."""
    position = start
    window = next(windows, None)
    upcoming = None
    while window is not None:
        if is_run(window.order) or window.num_samples == 0:  # streams block by block
            for part in read_window(opener, window, offsets):
                position += len(part.samples)
                yield part
            window, upcoming = next(windows, None), None
            continue
        current = (upcoming or _Upcoming(opener, window)).samples(offsets)
        window = next(windows, None)
        upcoming = None if window is None or is_run(window.order) else _Upcoming(opener, window)
        sent, size = 0, len(current.samples)
        for part in _pieces(current, position, piece):
            yield part
            sent += len(part.samples)
            if upcoming is not None:
                upcoming.advance(upcoming.total * sent // size)
        position += size
