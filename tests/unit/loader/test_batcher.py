"""X1 and X9 (specs/batch-transport.md): the pure batcher regroups any windowing of a consumer's
samples into exact batches, in order; the emitter labels each dict batch with its consumed
boundary as exact ints."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError
from shardkit.loader.batcher import BatchCut, cut_batches
from shardkit.loader.collate import collate_samples
from shardkit.loader.emitter import Emitter
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.transfer.meta import META_KEY, BatchMeta
from shardkit.loader.transfer.packed import PackedBatch
from shardkit.read.stream import WindowSamples


def _windows(sizes: list[int]) -> list[WindowSamples]:
    windows, first = [], 0
    for size in sizes:
        ids = np.arange(first, first + size, dtype=np.int64)
        windows.append(WindowSamples([{"id": int(i)} for i in ids], ids, ids % 3 == 0))
        first += size
    return windows


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 9), max_size=12), batch_size=st.integers(1, 7))
def test_any_windowing_gives_the_same_exact_batches_in_order(sizes, batch_size):
    total = sum(sizes) - sum(sizes) % batch_size
    windows = _windows(sizes)
    if sum(sizes) % batch_size:
        with pytest.raises(PlanError, match="consumer 5: .* left over"):
            list(cut_batches(windows, batch_size, consumer=5))
        return
    cuts = list(cut_batches(windows, batch_size, consumer=5))
    assert len(cuts) == total // batch_size
    for number, cut in enumerate(cuts):
        want = np.arange(number * batch_size, (number + 1) * batch_size)
        assert [s["id"] for part in cut.parts for s in part] == want.tolist()
        assert cut.indices.tolist() == want.tolist()
        assert cut.padded.tolist() == (want % 3 == 0).tolist()


@pytest.mark.parametrize("pack", [False, True])
def test_every_dict_batch_carries_its_boundary_as_ints(pack):
    def collate(cut: BatchCut) -> dict:
        return collate_samples([s for part in cut.parts for s in part])

    emitter = Emitter(collate, WorkerStats(), consumer=3, epoch=2, position=8, pack=pack)
    for number, cut in enumerate(cut_batches(_windows([5, 7]), 4, consumer=3)):
        batch = emitter.emit(cut)
        if pack:
            assert isinstance(batch, PackedBatch)
            batch = batch.unpack()
        meta = batch[META_KEY]
        assert isinstance(meta, BatchMeta) and meta[:3] == (3, 8 + 4 * (number + 1), 2)
        assert all(type(value) is int for value in meta[:3])
        assert batch["id"].tolist() == list(range(4 * number, 4 * number + 4))
