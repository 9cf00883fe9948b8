"""RP10 (specs/read-path.md): a consumer holds one window's blocks at a time. While the reader
reads window k+1, nothing of window k is kept alive by the loader's own stages: not the window,
not the last batch cut from it, not a tail short of a batch (its rows are copied out of the
joined blocks). Before, every block of window k lived until window k+1 was read whole: peak
memory two windows (a warm epoch of 85 KB samples: peak RSS 1.68 GB, 0.99 GB after)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.format.column_parse import Column
from shardkit.loader.batcher import cut_batches
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.transforms import transformed
from shardkit.read.column_pieces import ColumnPiece, as_samples, join_pieces
from shardkit.read.options import ReadOptions
from shardkit.read.stream import WindowSamples

windows_of_blocks = st.lists(st.lists(st.integers(1, 5), min_size=2, max_size=4), min_size=1, max_size=6)


class Blocks:
    """Windows joined in place from fresh blocks (as read/stream.py ``read_window`` makes them),
    each block watched by a weak reference; ``check`` runs as each next window is read."""

    def __init__(self, layout: list[list[int]], seed: int) -> None:
        self.layout, self.rng = layout, np.random.default_rng(seed)
        self.watched: list[list[weakref.ref[np.ndarray]]] = []
        self.expected: list[bytes] = []  # every sample's bytes, in output order
        self.checked = 0

    def windows(self) -> Iterator[WindowSamples]:
        first = 0
        for number, sizes in enumerate(self.layout):
            if number:  # reading window `number`: nothing of the windows before may be alive
                alive = [w for refs in self.watched for w in refs if w() is not None]
                assert not alive, f"{len(alive)} blocks of earlier windows alive while window {number} is read"
                self.checked += 1
            pieces, refs = [], []
            for size in sizes:
                lengths = self.rng.integers(1, 40, size)
                offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
                data = self.rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8)
                refs.append(weakref.ref(data))
                pieces.append(ColumnPiece([Column("jpg", "bytes", data, offsets)], np.arange(size, dtype=np.int64)))
            self.watched.append(refs)
            joined = join_pieces(pieces)
            assert joined is not None
            rows = [bytes(s["jpg"]) for p in pieces for s in p.samples()]
            del pieces, data
            count = len(rows)
            order = self.rng.permutation(count)
            self.expected += [rows[i] for i in order]
            ids = np.arange(first, first + count, dtype=np.int64)
            first += count
            yield WindowSamples(joined.select(order), ids, np.zeros(count, dtype=bool))
            del joined


@settings(max_examples=150, deadline=None)
@given(layout=windows_of_blocks, batch_size=st.integers(1, 9), seed=st.integers(0, 2**16),
       transform=st.booleans())
def test_no_block_of_a_window_is_alive_while_the_next_is_read_rp10(layout, batch_size, seed, transform):
    blocks = Blocks(layout, seed)
    total = sum(sum(sizes) for sizes in layout)
    pad = (-total) % batch_size
    if pad:  # a last window making the batches whole (the plan gives each consumer whole batches)
        layout.append([pad - 1, 1] if pad > 1 else [1])
    windows: Iterator[WindowSamples] = blocks.windows()
    if transform:  # a user's transform on sample dicts (loader/transforms.py)
        windows = transformed(windows, lambda sample: sample, with_context=False, epoch=0, seed=0)
    got: list[bytes] = []
    for cut in cut_batches(windows, batch_size, consumer=0):
        assert len(cut.indices) == batch_size
        got += [bytes(s["jpg"]) for part in cut.parts for s in as_samples(part)]
        del cut  # as the emitter does (map(emit, cuts) holds no cut once emitted)
    assert got == blocks.expected  # the copied tails are the same samples, in order
    assert blocks.checked == len(layout) - 1


def _write_source(path: str, first: int, count: int) -> None:
    with sk.ShardWriter(path, shard_size="16KiB", block_size="512B") as writer:
        for i in range(first, first + count):
            writer.write({"id": i, "tokens": np.full(20 + i % 7, i, dtype=np.int32)})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(40, 120), min_size=2, max_size=3), window=st.sampled_from([16, 32]),
       seed=st.integers(0, 3))
def test_the_mixture_source_drops_each_window_before_reading_the_next_rp10(tmp_path_factory, sizes, window, seed):
    """RP10 for a mixture (loader/mixture_source.py): the source's read drops its window before it
    reads the next. Small blocks make every window read fresh ones; a window finalized only after
    the next window's blocks were read (the read counted more blocks) was held across that read."""
    root, first, sources = tmp_path_factory.mktemp("mix"), 0, []
    for number, count in enumerate(sizes):
        _write_source(str(root / f"s{number}"), first, count)
        sources.append(sk.Source(str(root / f"s{number}"), 1.0, f"s{number}"))
        first += count
    dataset = sk.StreamingDataset(sk.Mixture(sources, samples_per_epoch=first, composition="stratified"),
                                  batch_size=4, shuffle_window=window, seed=seed)
    plan = dataset.step_plan(0, 1, 1)
    stats = WorkerStats()
    windows = dataset.source.read(plan, 0, 0, None, stats, ReadOptions(views=True), 4)
    yielded: list[int] = []
    finalized: dict[int, int] = {}
    seen = 0
    for samples in windows:  # not enumerate(): its reused result tuple would hold the window
        number = len(yielded)
        yielded.append(stats.read.blocks)
        weakref.finalize(samples, lambda n=number: finalized.__setitem__(n, stats.read.blocks))  # blocks then
        seen += len(samples.indices)
        del samples
    assert abs(seen - first) < 4 and len(yielded) > 2  # whole batches of 4: a tail dropped or padded
    read_after = [n for n in range(len(yielded) - 1) if yielded[n + 1] > yielded[n]]
    assert read_after, "no window read a fresh block: the test would not see a held window"
    assert all(finalized[n] == yielded[n] for n in read_after), (yielded, finalized)
