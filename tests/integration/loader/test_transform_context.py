"""``transform(sample, ctx)``: per-sample randomness from (seed, epoch, global index), the same
whichever rank or worker decodes the sample, shared by every field (loader/transforms.py).
Real DataLoader workers; ranks pinned through ``StreamOptions``."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import shardkit as sk
from shardkit.loader.transforms import SampleContext, takes_context
from tests.helpers.resume import TOO_MANY_WORKERS

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)
SEED = 5


def flip_image_and_mask(sample: dict[str, Any], ctx: SampleContext) -> dict[str, Any]:
    """The README's example: one draw flips the image and its mask alike."""
    rng = ctx.rng()
    image = np.stack([sample["pair"], sample["pair"] * 10])  # 2×2 "image"
    mask = image > 0
    if rng.random() < 0.5:
        image, mask = image[:, ::-1].copy(), mask[:, ::-1].copy()
    return {"image": image, "mask": mask, "draw": rng.integers(1 << 62), "index": ctx.index,
            "epoch": ctx.epoch, "id": sample["id"]}


def draws(num_workers: int, world_size: int, epoch: int, path: str) -> dict[int, int]:
    """Global index → its draw, over every rank of one epoch (pads repeat their sample's)."""
    seen: dict[int, int] = {}
    for rank in range(world_size):
        ds = sk.StreamingDataset(path, batch_size=2, seed=SEED, tail="pad", transform=flip_image_and_mask,
                                 with_index=True)
        ds.options = dataclasses.replace(ds.options, rank=rank, world_size=world_size)
        loader = sk.ShardLoader(ds, num_workers=num_workers)
        loader.set_epoch(epoch)
        for batch in loader:
            for row in range(len(batch["id"])):
                index = int(batch["_index"][row])
                assert int(batch["index"][row]) == index == int(batch["id"][row])
                assert int(batch["epoch"][row]) == epoch
                image, mask = batch["image"][row].numpy(), batch["mask"][row].numpy()
                assert np.array_equal(mask, image > 0), "image and mask must get the same flip"
                seen[index] = int(batch["draw"][row])
    return seen


@pytest.mark.slow
def test_a_sample_gets_the_same_draw_on_any_topology(small_dataset: str) -> None:
    reference = draws(0, 1, epoch=1, path=small_dataset)
    assert sorted(reference) == list(range(23))
    for num_workers, world_size in [(2, 1), (1, 2), (0, 3)]:
        assert draws(num_workers, world_size, epoch=1, path=small_dataset) == reference
    for index, draw in reference.items():  # it is sample_rng's stream, after one random()
        rng = sk.sample_rng(SEED, 1, index)
        rng.random()
        assert draw == rng.integers(1 << 62)
    assert draws(0, 1, epoch=2, path=small_dataset) != reference  # a new epoch, new draws


def test_one_argument_transforms_keep_working(small_dataset: str) -> None:
    ds = sk.StreamingDataset(small_dataset, batch_size=4, transform=lambda s: {"id": s["id"] + 100})
    ids = sorted(int(i) for batch in sk.ShardLoader(ds) for i in batch["id"])
    assert ids[0] >= 100 and len(ids) == 20


def one(sample: Any) -> Any:
    return sample


def two(sample: Any, ctx: Any) -> Any:
    return sample


def optional(sample: Any, strict: bool = False) -> Any:
    return sample


def optional_ctx(sample: Any, ctx: Any = None) -> Any:
    return sample


def varargs(*args: Any) -> Any:
    return args[0]


class Callable2:
    def __call__(self, sample: Any, ctx: Any) -> Any:
        return sample


@pytest.mark.parametrize(("transform", "expected"), [
    (one, False), (two, True), (optional, False), (optional_ctx, True), (varargs, False),
    (Callable2(), True), (len, False), (lambda s, c: s, True),
])
def test_the_signature_decides_whether_ctx_is_passed(transform: Any, expected: bool) -> None:
    assert takes_context(transform) is expected
