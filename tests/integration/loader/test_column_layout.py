"""End to end, B3/B6 (specs/shard-format.md): the same samples written as column blocks and as
row blocks stream as the same batches — shuffled and not, with and without workers, with a
padded tail and a transform — so the column path changes speed, never data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import shardkit as sk
from tests.unit.loader.test_view_collation import assert_batch_equal


def _sample(i: int) -> dict[str, Any]:
    return {"id": i, "tokens": (np.arange(i % 37) * 7 + i).astype("<i4"), "label": i % 3 == 0,
            "score": i / 7, "text": f"s{i}", "blob": bytes([i % 251]) * (i % 5)}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = {}
    for layout in ("auto", "rows"):
        folder = str(tmp_path_factory.mktemp(layout))
        with sk.ShardWriter(folder, block_size="8KiB", shard_size="48KiB", layout=layout) as writer:
            for i in range(1000):
                writer.write(_sample(i))
        out[layout] = folder
    return out


def _batches(folder: str, workers: int, shuffle: bool, transform: Any = None, spread: int = 1) -> list[dict[str, Any]]:
    # spread=1 by default here: the two layouts cut shards at different sample counts, and a
    # spread plan's block size follows the shard sizes (specs/partition.md P18).
    ds = sk.StreamingDataset(folder, batch_size=24, shuffle=shuffle, seed=3, tail="pad", shuffle_window=300,
                             with_index=True, transform=transform, spread=spread)
    return list(sk.ShardLoader(ds, num_workers=workers))


def _double(sample: dict[str, Any]) -> dict[str, Any]:
    return {**sample, "tokens": sample["tokens"] * 2}


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("shuffle", [False, True])
def test_column_and_row_blocks_stream_the_same_batches(layouts: dict[str, str], workers: int, shuffle: bool) -> None:
    with sk.open_dataset(layouts["auto"]).open_shard(0) as reader:
        assert set(reader.index.blocks["layout"].tolist()) == {1}  # the writer did make columns
    got, want = _batches(layouts["auto"], workers, shuffle), _batches(layouts["rows"], workers, shuffle)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        assert_batch_equal(g, w)


def test_a_transform_gets_dicts_from_column_blocks(layouts: dict[str, str]) -> None:
    got, want = _batches(layouts["auto"], 0, True, _double), _batches(layouts["rows"], 0, True, _double)
    for g, w in zip(got, want, strict=True):
        assert_batch_equal(g, w)


@pytest.mark.parametrize("layout", ["auto", "rows"])
def test_spread_windows_of_many_spans_stream_the_right_samples(layouts: dict[str, str], layout: str) -> None:
    """P18: with the default spread a window lists many short spans; each batch row is still the
    sample its index names (column pieces joined across spans and shards)."""
    batches = _batches(layouts[layout], 2, True, spread=12)
    assert sum(len(batch["_index"]) for batch in batches) == 1008  # 1000 + 8 pads
    for batch in batches:
        for row, index in enumerate(batch["_index"].tolist()):
            assert batch["text"][row] == f"s{index}" and int(batch["id"][row]) == index
