"""The node-wide download budget: flock slots shared by processes, crash-safe (K20)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from multiprocessing.synchronize import Event

import pytest

from shardkit.errors import CacheError, StorageTimeoutError
from shardkit.storage.budget import NodeBudget
from tests.helpers.fork_holders import killed_holder_with_live_child

FORK = multiprocessing.get_context("fork")


def _hold_then_wait(root: str, count: int, held: Event, done: Event) -> None:
    budget = NodeBudget(root, count)
    for _ in range(count):
        budget.acquire(5.0)
    held.set()
    done.wait(60)


def test_slots_are_exclusive_and_come_back_when_released(tmp_path: object) -> None:
    budget = NodeBudget(str(tmp_path), 2)
    first, second = budget.acquire(1.0), budget.acquire(1.0)
    assert budget.try_acquire() is None and budget.num_free() == 0
    with pytest.raises(StorageTimeoutError, match="2 download slots of the node"):
        budget.acquire(0.05)
    assert budget.acquire(5.0, cancel=lambda: True) is None  # cancelled, not timed out
    budget.release(first)  # type: ignore[arg-type]
    assert budget.num_free() == 1
    budget.release(second)  # type: ignore[arg-type]
    assert budget.num_free() == 2


@pytest.mark.slow
def test_a_sigkilled_holder_frees_its_slots_k20(tmp_path: object) -> None:
    held, done = FORK.Event(), FORK.Event()
    holder = FORK.Process(target=_hold_then_wait, args=(str(tmp_path), 3, held, done))
    holder.start()
    assert held.wait(30)
    budget = NodeBudget(str(tmp_path), 3)
    assert budget.num_free() == 0  # the live holder has them all
    os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
    holder.join(30)
    assert budget.num_free() == 3


@pytest.mark.slow
def test_a_forked_child_does_not_keep_its_dead_parents_slot_k20(tmp_path: object) -> None:
    """flock belongs to the open file; a child forked during the hold has a copy of it. The
    child drops its copy at fork, so the slot dies with the parent, not with the child."""
    with killed_holder_with_live_child(lambda: NodeBudget(str(tmp_path), 1).acquire(5.0)):
        assert NodeBudget(str(tmp_path), 1).num_free() == 1  # the grandchild still runs


def test_a_link_planted_at_the_slots_folder_is_refused(tmp_path: object) -> None:
    target = os.path.join(str(tmp_path), "elsewhere")
    os.mkdir(target)
    os.symlink(target, os.path.join(str(tmp_path), ".slots"))
    with pytest.raises(CacheError, match="not a folder"):
        NodeBudget(str(tmp_path), 1)
