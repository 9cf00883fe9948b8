"""A plain ``torch.utils.data.DataLoader(StreamingDataset(...))`` fails at once, naming
``ShardLoader`` (R11 in specs/resume-state.md); ``ShardLoader`` itself, direct iteration and
spawn-started workers are not refused. Real DataLoader workers."""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import DataLoader

import shardkit as sk
from shardkit.errors import LoaderUsageError
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)


def dataset(path: str) -> sk.StreamingDataset:
    return sk.StreamingDataset(path, batch_size=4, seed=3, with_index=True)


def keep_list(samples: list[Any]) -> list[Any]:
    return samples


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("settings", [
    {},  # the MosaicML habit: DataLoader(ds) (batch_size=1)
    {"batch_size": None},  # no re-batching, but the internal key and the epochs would leak
    {"batch_size": 8, "collate_fn": keep_list},  # what a trainer building its own loader does
], ids=["default", "batch_size_none", "trainer_like"])
def test_a_plain_dataloader_is_refused_with_the_fix(small_dataset: str, num_workers: int,
                                                    settings: dict[str, Any]) -> None:
    loader = DataLoader(dataset(small_dataset), num_workers=num_workers, **settings)
    with pytest.raises(LoaderUsageError, match=r"shardkit\.ShardLoader\(dataset"):
        next(iter(loader))


@pytest.mark.slow
def test_persistent_plain_workers_are_refused_too(small_dataset: str) -> None:
    loader = DataLoader(dataset(small_dataset), batch_size=None, num_workers=2, persistent_workers=True)
    with pytest.raises(LoaderUsageError, match="ShardLoader"):
        next(iter(loader))


@pytest.mark.parametrize("context", [None, "spawn"])
def test_shard_loader_and_direct_iteration_are_not_refused(small_dataset: str, context: str | None) -> None:
    """ShardLoader's collation survives pickling to spawn-started workers (same function)."""
    workers = 0 if context is None else 1
    loader = sk.ShardLoader(dataset(small_dataset), num_workers=workers, multiprocessing_context=context)
    ids = sorted(int(i) for batch in loader for i in batch["_index"])
    assert len(ids) == 20 and len(set(ids)) == 20  # 23 samples, batch 4, drop: 5 batches
    assert all("_shardkit" not in batch for batch in loader)
    direct = list(iter(dataset(small_dataset)))  # no DataLoader: a quick look is allowed
    assert len(direct) == 5
