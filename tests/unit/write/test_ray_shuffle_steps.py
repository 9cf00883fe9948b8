"""The Ray engine's shuffle steps without Ray (specs/ray-packing.md Y7, pack-shuffle.md PS6):
however the source rows are cut into batches and the batches into pieces, and with bad records
skipped, encode → number → sort by key gives the local engine's ``ExternalShuffle`` order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.write.ray import shuffle as ray_shuffle
from shardkit.write.ray.rows import FileRows
from shardkit.write.ray.shuffle import ORDINAL, EncodeBatch, key_boundaries, number, run_keys, with_ordinals
from shardkit.write.shuffle import ExternalShuffle, ShuffleOptions


def write_files(root: Path, sizes: list[int], bad: set[tuple[int, int]]) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for f, size in enumerate(sizes):
        path = root / f"{f:03d}.jsonl"
        lines = ["{broken" if (f, i) in bad else json.dumps({"f": f, "i": i, "pad": "x" * (i % 7)})
                 for i in range(size)]
        path.write_text("".join(line + "\n" for line in lines))
        paths.append(str(path))
    return paths


def ray_order(paths: list[str], cuts: list[int], seed: int) -> tuple[list[bytes], Any]:
    """Steps 1-3 of Y7 on plain pyarrow tables, with the source rows cut at ``cuts``."""
    rows = with_ordinals([{"file": p} for p in paths])
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(rows))), len(rows)]
    encode = EncodeBatch(FileRows("jsonl"), skip_bad=True)
    tables = [t for a, b in zip(bounds, bounds[1:], strict=False)
              for t in encode(pa.Table.from_pylist(rows[a:b]))]
    table = pa.concat_tables(tables)
    heads = [(s, d) for s, p, d in zip(*(table.column(c).to_pylist() for c in ("src", "pos", "data")),
                                       strict=True) if p < 0]
    summary, first_index = number(sorted(heads))
    samples = table.filter(pa.compute.greater_equal(table.column("pos"), 0))
    keyed = ray_shuffle.AddKeys(first_index, seed)(samples)
    order = np.argsort(keyed.column("key").to_numpy(), kind="stable")
    return [keyed.column("data")[int(i)].as_py() for i in order], summary


def local_order(paths: list[str], seed: int, tmp: Path) -> list[bytes]:
    encode = EncodeBatch(FileRows("jsonl"), skip_bad=True)
    table = pa.concat_tables(list(encode(pa.Table.from_pylist(with_ordinals([{"file": p} for p in paths])))))
    encoded = [d for p, d in zip(table.column("pos").to_pylist(), table.column("data").to_pylist(),
                                 strict=True) if p >= 0]
    with ExternalShuffle(ShuffleOptions(seed=seed, tmp_dir=str(tmp))) as external:
        external.add(encoded)
        return [data for piece in external.drain() for data in piece]


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), min_size=1, max_size=6),
       cuts=st.lists(st.integers(0, 6), max_size=4),
       bad=st.sets(st.tuples(st.integers(0, 5), st.integers(0, 29)), max_size=5),
       piece_bytes=st.sampled_from([1, 100, 1 << 20]), seed=st.integers(0, 2**32))
def test_any_batching_gives_the_local_key_order(tmp_path_factory: pytest.TempPathFactory, sizes: list[int],
                                                cuts: list[int], bad: set[tuple[int, int]], piece_bytes: int,
                                                seed: int) -> None:
    tmp = tmp_path_factory.mktemp("src")
    paths = write_files(tmp, sizes, bad)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ray_shuffle, "PIECE_BYTES", piece_bytes)
        ours, summary = ray_order(paths, cuts, seed)
    assert ours == local_order(paths, seed, tmp)
    skipped = [(f, i) for f, size in enumerate(sizes) for i in range(size) if (f, i) in bad]
    assert [s["origin"] for s in summary.skipped] == [f"{paths[f]}:{i + 1}" for f, i in skipped]
    assert summary.num_samples == sum(sizes) - len(skipped)


def test_run_keys_and_boundaries() -> None:
    from shardkit.write.shuffle import sort_keys

    index = np.array([5, 6, 7, 0, 1, 9, 3, 4], dtype=np.int64)
    assert np.array_equal(run_keys(3, index), np.array([sort_keys(3, int(i), 1)[0] for i in index]))
    assert len(run_keys(3, np.array([], dtype=np.int64))) == 0
    keys = (sort_keys(0, 0, 10_000) ^ np.uint64(1 << 63)).view(np.int64)
    bounds = key_boundaries(4)
    assert len(bounds) == 3 and bounds == sorted(bounds) and key_boundaries(1) == []
    counts = np.bincount(np.searchsorted(np.array(bounds), keys, side="right"), minlength=4)
    assert counts.min() > 2300  # ~2,500 per key range: the partitions are even
    assert ORDINAL not in {"file", "item"}
