"""``sk.DataParallel`` resolved into the plan's rank and size, and the replica checks of the
gathered rows (specs/partition.md P22-P26); one process, no torch.distributed."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

import shardkit as sk
from shardkit.errors import StateError
from shardkit.loader.data_parallel import DataParallelRank, as_data_parallel
from shardkit.loader.replicas import by_dp_rank
from tests.helpers.datasets import write_dataset


def test_a_rank_and_size_pair_resolves_to_the_plans_rank_and_size() -> None:
    assert as_data_parallel((1, 4)).resolve() == DataParallelRank(1, 4, True)
    assert sk.DataParallel(rank=0, size=2, reads=False).resolve() == DataParallelRank(0, 2, False)
    assert sk.DataParallel().resolve() == DataParallelRank(0, 1, True)  # no group: the default one


@pytest.mark.parametrize(("given", "error"), [
    (sk.DataParallel(rank=2, size=2), ValueError), (sk.DataParallel(rank=1), ValueError),
    (sk.DataParallel(rank=True, size=2), TypeError), (sk.DataParallel(group="dp"), TypeError),
    (sk.DataParallel(mesh_dim="dp"), ValueError), (sk.DataParallel(reads=0), TypeError),  # type: ignore[arg-type]
])
def test_a_malformed_data_parallel_is_refused_when_the_dataset_is_made(given: sk.DataParallel,
                                                                        error: type[Exception]) -> None:
    with pytest.raises(error, match="DataParallel"):
        given.resolve()


def test_an_unknown_data_parallel_value_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="data_parallel.*'dp'"):
        as_data_parallel("dp")


def test_the_dataset_partitions_by_the_data_parallel_rank_only(tmp_path: Path) -> None:
    """P22: ``data_parallel=(r, n)`` plans for n ranks, kept as ints (spawn workers pickle them)."""
    path = write_dataset(str(tmp_path / "ds"), (20, 0, 17, 23))
    ds = sk.StreamingDataset(path, batch_size=3, tail="pad", data_parallel=(1, 2))
    assert (ds.options.rank, ds.options.world_size, ds.options.reads) == (1, 2, True)
    assert len(ds) == 30
    assert all(type(v) is int for v in (ds.options.rank, ds.options.world_size))  # no group reaches workers


def test_a_rank_that_reads_nothing_yields_nothing_and_saves_the_start(tmp_path: Path) -> None:
    """P26 on one process: no batch, ``len`` 0, and the state of an untouched epoch."""
    path = write_dataset(str(tmp_path / "ds"), (20, 0, 17, 23))
    ds = sk.StreamingDataset(path, batch_size=3, data_parallel=sk.DataParallel(rank=0, size=1, reads=False))
    loader = sk.ShardLoader(ds, num_workers=2)
    assert len(ds) == 0 and len(loader) == 0
    batches = iter(loader)  # a DataLoader with workers starts them here
    assert multiprocessing.active_children() == []
    assert list(batches) == []
    reader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=3), num_workers=2)
    assert loader.state_dict()["plan"] == reader.state_dict()["plan"]


def _row(reads: int, dp: int, size: int, *values: int) -> list[int]:
    return [reads, dp, size, len(values), *values]


def test_rows_come_back_by_data_parallel_rank_one_replica_each() -> None:
    gathered = [_row(1, 0, 2, 5, 6), _row(1, 0, 2, 5, 6), _row(1, 1, 2, 7, 8), _row(0, 0, 2, 0, 0),
                _row(1, 1, 2, 7, 8)]
    assert by_dp_rank(gathered, "offsets") == [[5, 6], [7, 8]]


def test_replicas_at_different_boundaries_are_an_error_naming_both_ranks() -> None:
    gathered = [_row(1, 0, 1, 5), _row(1, 0, 1, 6)]
    named = r"ranks 0 and 1 are replicas of data-parallel rank 0.*rank 0 \[5\], rank 1 \[6\]"
    with pytest.raises(StateError, match=named):
        by_dp_rank(gathered, "offsets")


def test_a_data_parallel_rank_without_a_reader_or_a_disagreeing_size_is_an_error() -> None:
    with pytest.raises(StateError, match=r"no rank reads data-parallel ranks \[1\] of 2"):
        by_dp_rank([_row(1, 0, 2, 5), _row(0, 1, 2, 5)], "offsets")
    with pytest.raises(StateError, match="disagree on the data-parallel size.*1: 3"):
        by_dp_rank([_row(1, 0, 2, 5), _row(1, 1, 3, 5)], "offsets")
