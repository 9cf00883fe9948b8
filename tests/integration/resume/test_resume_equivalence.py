"""Resume equivalence (G6 in docs/guarantees.md) through the real loader: kill at many points and shapes, resume
from ``state_dict()`` on the same or another topology, prove what the loop received.

Every case runs through ``tests/helpers/resume.py`` (``run_chain`` + ``check_chain``), which
asserts per epoch: no sample twice and, with ``tail="pad"``, none missing (G2, R3); with
``drop`` exactly the last plan's reported tail missing (P3, R4); offsets == received (G5, R9);
each consumer continues in plan order (R2, R4); equal steps per rank == ``len(loader)`` (G3);
same-topology resumes keep the exact batch order (L4); refusals (R8, R9, L5).
Elastic cases use real gloo ranks (one process per rank, W worker processes each).
"""

from __future__ import annotations

import copy
import shutil
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shardkit as sk
from shardkit.errors import StateError
from tests.helpers.datasets import write_dataset
from tests.helpers.resume import (
    TOO_MANY_WORKERS,
    DataSpec,
    Segment,
    Shape,
    chain_settings,
    check_chain,
    check_same_order,
    make_loader,
    plan_of,
    run_chain,
)

pytestmark = pytest.mark.filterwarnings(TOO_MANY_WORKERS)


# ---- many kill points and shapes, one training process -----------------------------------------

@st.composite
def chains(draw: st.DrawFn, /, small: str, uneven: str,
           max_world: int = 1) -> tuple[DataSpec, list[Segment], int]:
    """A dataset, 1-2 epochs and 2-3 segments: world sizes up to ``max_world``, W 0-3 (W 0↔1
    keeps the partition, others are elastic), batch sizes, persistent workers, delivery order,
    kill points anywhere in the job (0 = right after a resume, an epoch's end, past the end)."""
    use_small = draw(st.booleans())
    data = DataSpec(
        small if use_small else uneven, 23 if use_small else 1001,
        shuffle=draw(st.booleans()), seed=draw(st.integers(0, 3)),
        tail=draw(st.sampled_from(["drop", "pad"])),
        shuffle_window=draw(st.sampled_from([1, 5, 64])),
    )
    num_epochs = draw(st.integers(1, 2))
    batch_sizes = st.integers(1, 6) if use_small else st.integers(8, 40)
    segments = []
    num_segments = draw(st.integers(2, 3))
    for number in range(num_segments):
        workers = draw(st.integers(0, 3))
        shape = Shape(world_size=draw(st.integers(1, max_world)), num_workers=workers,
                      batch_size=draw(batch_sizes),
                      persistent_workers=workers > 0 and draw(st.booleans()),
                      in_order=draw(st.booleans()),
                      batches_per_transfer=draw(st.sampled_from([1, 2, 4])))
        stop = None
        if number + 1 < num_segments:
            steps = plan_of(data, shape, 0, None).steps_per_rank * num_epochs
            stop = draw(st.integers(0, steps + 1))
        segments.append(Segment(shape, stop))
    return data, segments, num_epochs


@chain_settings(15)
@given(data=st.data())
def test_resume_equivalence_at_random_kill_points(small_dataset: str, uneven_dataset: str,
                                                 data: st.DataObject) -> None:
    """G6/R2-R5: chained kills and resumes at random points, W and batch size changing."""
    spec, segments, num_epochs = data.draw(chains(small_dataset, uneven_dataset))
    results = run_chain(spec, segments, num_epochs, "/nonexistent")  # one rank: no workdir
    check_chain(spec, results, num_epochs)


@pytest.mark.slow
@chain_settings(8)
@given(data=st.data())
def test_resume_equivalence_on_gloo_ranks_at_random_kill_points(
    small_dataset: str, uneven_dataset: str, tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
) -> None:
    """G6/R2-R5 with real gloo ranks: world size 1-4 changing between kills (elastic)."""
    spec, segments, num_epochs = data.draw(chains(small_dataset, uneven_dataset, max_world=4))
    workdir = str(tmp_path_factory.mktemp("chain"))
    results = run_chain(spec, segments, num_epochs, workdir, processes=True)
    check_chain(spec, results, num_epochs)


@chain_settings(12)
@given(data=st.data())
def test_same_topology_order_holds_for_any_group_size_and_kill_point(
    small_dataset: str, uneven_dataset: str, tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
) -> None:
    """L4/X8/R2: W 1-3 workers sending groups of 1-5 batches, killed 1-2 times anywhere (in the
    middle of a group included) and resumed on the same topology: the rank yields exactly the
    uninterrupted run's batches, in the same order."""
    use_small = data.draw(st.booleans())
    spec = DataSpec(small_dataset if use_small else uneven_dataset, 23 if use_small else 1001,
                    tail=data.draw(st.sampled_from(["drop", "pad"])), seed=data.draw(st.integers(0, 3)),
                    shuffle_window=data.draw(st.sampled_from([1, 5, 64])))
    workers = data.draw(st.integers(1, 3))
    shape = Shape(num_workers=workers, batch_size=data.draw(st.integers(1, 3) if use_small else st.integers(8, 24)),
                  persistent_workers=data.draw(st.booleans()),
                  batches_per_transfer=data.draw(st.integers(1, 5)))
    steps = plan_of(spec, shape, 0, None).steps_per_rank
    kills = sorted(data.draw(st.lists(st.integers(1, max(steps - 1, 1)), min_size=1, max_size=2, unique=True)))
    lengths = [b - a for a, b in zip([0, *kills[:-1]], kills, strict=True)]  # steps of each killed segment
    segments = [*(Segment(shape, length) for length in lengths), Segment(shape)]
    workdir = str(tmp_path_factory.mktemp("order"))
    results = run_chain(spec, segments, 1, workdir)
    check_chain(spec, results, 1)
    check_same_order(spec, segments, 1, results, workdir)


@pytest.mark.parametrize(("world", "workers", "kills"),
                         [(1, 3, [1, 5]), (1, 2, [3]), pytest.param(2, 2, [1, 4], marks=pytest.mark.slow),
                          pytest.param(3, 3, [2], marks=pytest.mark.slow)])
def test_same_topology_resume_keeps_the_exact_order(uneven_dataset: str, tmp_path: object,
                                                    world: int, workers: int,
                                                    kills: list[int]) -> None:
    """L4/R2: killed after a number of batches that is not a multiple of W (so the resumed
    DataLoader's round-robin starts at another worker) and resumed on the same topology, each
    rank yields exactly the uninterrupted run's remaining batches in the same order."""
    data = DataSpec(uneven_dataset, 1001, tail="pad", seed=9, shuffle_window=16)
    shape = Shape(world, workers, 8, persistent_workers=True)
    segments = [*(Segment(shape, k) for k in kills), Segment(shape)]
    results = run_chain(data, segments, 2, str(tmp_path), processes=world > 1)
    check_chain(data, results, 2)
    check_same_order(data, segments, 2, results, str(tmp_path))


def test_state_right_after_a_resume_is_the_state_resumed_from(small_dataset: str) -> None:
    """R1/R2: resume, then save before taking a batch: the same state (steps aside)."""
    data = DataSpec(small_dataset, 23, tail="pad", shuffle_window=4)
    shape = Shape(num_workers=2, batch_size=2)
    results = run_chain(data, [Segment(shape, 3), Segment(shape, 0), Segment(shape)], 1, "")
    check_chain(data, results, 1)
    assert results[1].state["plan"] == results[0].state["plan"]
    assert results[1].state["epoch"] == results[0].state["epoch"] == 0


def test_state_right_after_an_elastic_resume_nests_its_parent(small_dataset: str) -> None:
    """R4/R5: an elastic resume starts its new plan at 0 and records the old state as parent."""
    data = DataSpec(small_dataset, 23, tail="drop", shuffle_window=4)
    results = run_chain(data, [Segment(Shape(num_workers=2, batch_size=3), 2),
                               Segment(Shape(num_workers=3, batch_size=2), 0),
                               Segment(Shape(num_workers=0, batch_size=1))], 1, "")
    check_chain(data, results, 1)
    saved = results[1].state["plan"]
    assert saved["offsets"] == [0, 0, 0]
    assert saved["parent"] == results[0].state["plan"]


# ---- elastic resumes on real gloo ranks ---------------------------------------------------------

def shape(world: int, workers: int, batch: int) -> Shape:
    return Shape(world, workers, batch, persistent_workers=workers > 0)


ELASTIC = {
    # name: (dataset, tail, [(shape, stop_after), ...], epochs)
    "2x2-to-1x3": ("uneven", "pad", [(shape(2, 2, 8), 17), (shape(1, 3, 8), None)], 2),
    "1x0-to-3x2": ("uneven", "drop", [(shape(1, 0, 8), 50), (shape(3, 2, 8), None)], 1),
    "4x1-to-2x2": ("small", "pad", [(shape(4, 1, 2), 1), (shape(2, 2, 2), None)], 2),
    "batch-size-change": ("uneven", "drop", [(shape(2, 1, 8), 20), (shape(2, 1, 12), None)], 1),
    "chained-3-topologies": ("uneven", "pad", [(shape(2, 2, 8), 9), (shape(3, 1, 5), 30),
                                                (shape(4, 0, 16), 5), (shape(1, 2, 8), None)], 1),
    "same-topology": ("uneven", "drop", [(shape(3, 2, 8), 11), (shape(3, 2, 8), None)], 1),
    "seed-000-elastic": ("small", "drop", [(shape(2, 2, 3), 1), (shape(1, 3, 2), 2),
                                            (shape(2, 0, 1), None)], 1),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ELASTIC))
def test_elastic_resume_on_gloo_ranks(case: str, small_dataset: str, uneven_dataset: str,
                                      tmp_path: object) -> None:
    """G6 elastic: kill on one world size × workers, resume on another (R3-R5); also a batch
    size change, a chain over four topologies and a same-topology resume (R2)."""
    name, tail, steps, num_epochs = ELASTIC[case]
    path, num_samples = (small_dataset, 23) if name == "small" else (uneven_dataset, 1001)
    data = DataSpec(path, num_samples, tail=tail, seed=5, shuffle_window=32)
    segments = [Segment(s, stop) for s, stop in steps]
    results = run_chain(data, segments, num_epochs, str(tmp_path), processes=True)
    check_chain(data, results, num_epochs)


@pytest.mark.slow
@pytest.mark.parametrize("second", [shape(2, 2, 4), shape(3, 1, 4), shape(1, 1, 4)],
                         ids=["same", "elastic", "elastic-one-consumer"])
def test_state_saved_at_an_epoch_boundary(uneven_dataset: str, tmp_path: object,
                                          second: Shape) -> None:
    """R7, R10: a state saved after the last batch of epoch 0 has nothing left of epoch 0 on any
    topology — the tail its plan dropped stays dropped, as in the uninterrupted run (on one
    consumer those 9 samples would be 2 batches) — then epoch 1 starts fresh on the new one."""
    data = DataSpec(uneven_dataset, 1001, tail="drop", seed=2, shuffle_window=16)
    first = shape(2, 2, 4)
    steps = plan_of(data, first, 0, None).steps_per_rank
    results = run_chain(data, [Segment(first, steps), Segment(second)], 2, str(tmp_path),
                        processes=True)
    check_chain(data, results, 2)
    assert results[0].state["epoch"] == 0
    resumed_epoch0 = results[1].ranks[0][0]
    assert resumed_epoch0.epoch == 0
    assert resumed_epoch0.batches == []


# ---- refusals (R8, R9) ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved_state(small_dataset: str) -> dict:
    data = DataSpec(small_dataset, 23, tail="pad")
    results = run_chain(data, [Segment(Shape(num_workers=0, batch_size=2), 3)], 1, "")
    return results[0].state


def fresh_loader(small_dataset: str) -> sk.ShardLoader:
    return make_loader(DataSpec(small_dataset, 23, tail="pad"), Shape(num_workers=0, batch_size=2))


def test_resume_on_a_changed_dataset_is_refused(saved_state: dict, small_dataset: str) -> None:
    """G6/R8: a state of another dataset fingerprint is refused, naming both fingerprints."""
    other = tempfile.mkdtemp()
    try:
        write_dataset(f"{other}/ds", (5, 0, 7, 3, 9))  # one more sample: another fingerprint
        loader = make_loader(DataSpec(f"{other}/ds", 24, tail="pad"), Shape(batch_size=2))
        with pytest.raises(StateError, match="fingerprint") as error:
            loader.load_state_dict(saved_state)
        assert saved_state["plan"]["fingerprint"] in str(error.value)
        assert loader.streaming.fingerprint in str(error.value)
    finally:
        shutil.rmtree(other)


def _mutations() -> dict[str, tuple[str, object]]:
    """name → (dotted path, new value): malformed and newer-version states."""
    return {
        "loader-version-newer": ("version", 3),  # 2 adds the resume digest (R18)
        "plan-version-newer": ("plan.version", 2),
        "kind-missing": ("kind", None),
        "epoch-not-int": ("epoch", "0"),
        "epochs-disagree": ("epoch", 1),
        "offsets-not-list": ("plan.offsets", 4),
        "offsets-too-many": ("plan.offsets", [0, 0]),  # the saved run had one consumer
        "offset-not-batch-multiple": ("plan.offsets", [3]),
        "offset-negative": ("plan.offsets", [-2]),
        "offset-bool": ("plan.offsets", [True]),
        "params-unknown-tail": ("plan.params.tail", "wrap"),
        "fingerprint-not-str": ("plan.fingerprint", 7),
        "extra-key": ("plan.extra", 1),
        "parent-not-object": ("plan.parent", [1]),
    }


@pytest.mark.parametrize("mutation", sorted(_mutations()))
def test_malformed_or_newer_states_are_refused(saved_state: dict, small_dataset: str,
                                               mutation: str) -> None:
    """R8: malformed or newer states are refused with ``StateError`` on ``load_state_dict``."""
    path, value = _mutations()[mutation]
    state = copy.deepcopy(saved_state)
    *parents, key = path.split(".")
    target = state
    for part in parents:
        target = target[part]
    if value is None:
        del target[key]
    else:
        target[key] = value
    with pytest.raises(StateError):
        fresh_loader(small_dataset).load_state_dict(state)


def test_offsets_past_a_consumer_end_are_refused(saved_state: dict, small_dataset: str) -> None:
    """R9: an offset beyond its consumer's samples is refused before any batch is yielded."""
    state = copy.deepcopy(saved_state)
    state["plan"]["offsets"] = [1000]
    loader = fresh_loader(small_dataset)
    with pytest.raises(StateError, match=r"offsets\[0\]"):
        loader.load_state_dict(state)
        next(iter(loader))


def test_state_is_refused_when_not_a_dict(small_dataset: str) -> None:
    with pytest.raises(StateError):
        fresh_loader(small_dataset).load_state_dict([1, 2])  # type: ignore[arg-type]
