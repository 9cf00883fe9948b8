"""MX6: a schedule's cost is O(steps x sources) — here, O(change points) up to a log factor —
proven by counting work, never by a clock: the Python calls made to build a mixture with ``n``
in-epoch change points and its epoch plan, at ``n`` and ``2n``. Checking each change point's
epoch once per change point (every one re-cutting the whole epoch) was quadratic: 1,000 change
points took 20 s to construct a dataset, 3,000 took 191 s in ``shardkit plan`` (issue 32, item 12)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from shardkit.plan import PlanParams
from shardkit.plan.mixture.spec import MixSource, MixSpec, ScheduleStep
from shardkit.plan.mixture.state import mixture_plan

SAMPLES_PER_EPOCH = 100_000


def schedule(n: int) -> tuple[ScheduleStep, ...]:
    gap = SAMPLES_PER_EPOCH // (n + 1)
    return tuple(ScheduleStep(0, (float(i % 7 + 1), 1.0), 1 + i * gap) for i in range(n))


def build(n: int) -> None:
    spec = MixSpec((MixSource("a", np.array([300, 200])), MixSource("b", np.array([250]))), SAMPLES_PER_EPOCH,
                   schedule=schedule(n))
    plan = mixture_plan(spec, PlanParams(world_size=2, batch_size=8))
    plan.summary()


def python_calls(fn: Callable[[], Any]) -> int:
    """The Python function calls ``fn`` makes (a count of work that no machine load changes)."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("n", [100, 200])
def test_in_epoch_change_points_cost_linear_work(n: int) -> None:
    """MX6: twice the change points, at most ~2.5x the calls (n log n allows 2.2x; quadratic gives 4x)."""
    build(8)  # imports and caches first, so neither count includes them
    small, large = python_calls(lambda: build(n)), python_calls(lambda: build(2 * n))
    assert large <= 2.5 * small, f"{n} change points: {small} calls, {2 * n}: {large} ({large / small:.2f}x)"


def test_shardkit_plan_of_a_mix_file_costs_linear_work(tmp_path, capsys) -> None:
    """The same through ``shardkit plan MIX --json`` (which explains every segment)."""
    import json

    from shardkit.cli import main
    from tests.helpers.datasets import write_dataset

    write_dataset(str(tmp_path / "a"), [300, 200])
    write_dataset(str(tmp_path / "b"), [250])

    def run(n: int) -> None:
        steps = [{"first_epoch": 0, "first_sample": s.first_sample, "weights": {"a": s.weights[0], "b": 1}}
                 for s in schedule(n)]
        path = tmp_path / f"mix{n}.json"
        path.write_text(json.dumps({"samples_per_epoch": SAMPLES_PER_EPOCH, "schedule": steps,
                                    "sources": [{"path": "a", "name": "a"}, {"path": "b", "name": "b"}]}))
        assert main(["plan", str(path), "--batch-size", "8", "--world-size", "2", "--json"]) == 0
        capsys.readouterr()

    run(8)
    small, large = python_calls(lambda: run(150)), python_calls(lambda: run(300))
    assert large <= 2.5 * small, f"{small} calls, then {large} ({large / small:.2f}x)"
