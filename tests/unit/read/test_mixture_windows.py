"""A mixture consumer's next window decoded while the current one goes out (specs/mixture.md MX14):
the same samples in the same order as window-by-window reading, and no window decoded at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shardkit.plan import PlanParams
from shardkit.plan.mixture_state import mixture_plan
from shardkit.read.column_pieces import is_run
from shardkit.read.mixture import Mixture, Source, open_mixture
from shardkit.read.mixture_stream import iter_mixture_consumer
from shardkit.read.options import ReadOptions
from shardkit.read.stats import ReadStats
from tests.helpers.datasets import write_dataset

SIZES = {"web": [40, 0, 35, 22], "code": [19, 14], "math": [9]}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Source]:
    root = tmp_path_factory.mktemp("mixwin")
    return [Source(write_dataset(str(root / name), sizes), weight)
            for (name, sizes), weight in zip(SIZES.items(), (0.6, 0.3, 0.1), strict=True)]


def _read(sources: list[Source], params: PlanParams, consumer: int, start: int, piece: int | None,
          views: bool, composition: str) -> tuple[list[tuple[int, bool, int]], list[tuple[int, bool]]]:
    """(global index, padded, id) of every sample read; where each piece ends, and whether a window
    does too there (or a run, read block by block as before, goes on)."""
    opened = open_mixture(Mixture(sources, samples_per_epoch=170, composition=composition))
    plan = mixture_plan(opened.spec(), params)
    rows, ends, position = [], [], start
    free, at = set(), start  # where a piece may end off the batch grid: a window's end, inside a run
    for window in plan.consumer_windows(consumer, start):
        free |= set(range(at + 1, at + window.num_samples + 1)) if is_run(window.order) else {at + window.num_samples}
        at += window.num_samples
    for part in iter_mixture_consumer(opened, plan, consumer, start, options=ReadOptions(views=views),
                                      piece=piece):
        samples = part.samples.samples() if hasattr(part.samples, "samples") else part.samples
        rows += [(int(i), bool(p), int(s["id"])) for i, p, s in zip(part.indices, part.padded, samples, strict=True)]
        position += len(part.indices)
        ends.append((position, position in free))
    return rows, ends


@pytest.mark.parametrize("composition", ["random", "stratified"])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("views", [True, False])
def test_spread_decodes_yield_the_window_reader_s_samples_in_order(
    sources: list[Source], composition: str, shuffle: bool, views: bool, tmp_path: Path
) -> None:
    """MX14: for every consumer (windows split between consumers, a tail pad, a resume point),
    the pieces hold exactly what reading window by window yields, in the same order, and a piece
    ends where a batch does (or where a window does)."""
    params = PlanParams(seed=3, epoch=1, world_size=2, num_workers=2, batch_size=4, shuffle=shuffle,
                        shuffle_window=26, tail="pad")
    for consumer in range(4):
        for start in (0, 8):
            want, _ = _read(sources, params, consumer, start, None, views, composition)
            got, ends = _read(sources, params, consumer, start, 4, views, composition)
            assert got == want
            assert len(got) > 0
            assert all(end % 4 == 0 or at_window_end for end, at_window_end in ends)
            if shuffle:
                assert len(ends) >= len(got) // 4  # in pieces of at most a batch


def test_the_next_window_is_decoded_a_few_blocks_per_piece(sources: list[Source]) -> None:
    """MX14: after the first window, no step between two pieces decodes a whole window's blocks."""
    opened = open_mixture(Mixture(sources, samples_per_epoch=170, composition="random"))
    params = PlanParams(seed=1, epoch=0, world_size=1, num_workers=0, batch_size=2, shuffle_window=60)
    plan = mixture_plan(opened.spec(), params)
    stats = ReadStats()
    steps = []
    for _part in iter_mixture_consumer(opened, plan, 0, 0, stats=stats, options=ReadOptions(views=True), piece=2):
        steps.append(stats.blocks)
    first_window = steps[0]
    assert first_window > 4  # the first window is decoded before its first piece (several blocks)
    assert max(np.diff(steps)) < first_window // 2
    assert steps[-1] > first_window  # later windows were read too
