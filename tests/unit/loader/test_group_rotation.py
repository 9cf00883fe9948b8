"""L4/X8 without processes: the worker → consumer rotation after a same-topology resume,
checked against a model of DataLoader's delivery order over many plans and every cut point.

DataLoader (``in_order=True``) takes items from its workers round-robin starting at worker 0,
skipping workers that are exhausted. An item is a group of up to ``k`` batches of one consumer,
its boundaries on multiples of ``k`` in the consumer's sequence (``in_groups``). Resumed after
any prefix of the uninterrupted run's batches, the rotation chosen by
``shardkit.plan.worker_consumer`` must deliver exactly the rest, in the same order. The partition
(P2: a rank's consumers differ by at most one batch, longer ones first) is what makes a single
rotation enough; real plans from ``build_plan`` provide it."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.loader.transfer.packed import in_groups
from shardkit.plan import Plan, PlanParams, build_plan, plan_to_state, worker_consumer


def delivered(plan: Plan, rank: int, workers: int, group: int) -> list[tuple[int, int]]:
    """(consumer, batch number) in the order DataLoader hands one rank's batches over."""
    batch = plan.params.batch_size
    queues = []
    for worker in range(workers):
        consumer = worker_consumer(plan, rank, worker, workers, group)
        first = plan.start_offsets[consumer] // batch
        numbers = iter(range(first, plan.num_batches(consumer)))
        queues.append([[(consumer, n) for n in g.batches] for g in in_groups(numbers, group, first)])
    order, turn = [], 0
    while any(queues):
        if queues[turn]:
            order.extend(queues[turn].pop(0))
        turn = (turn + 1) % workers
    return order


@settings(max_examples=400, deadline=None)
@given(shards=st.lists(st.integers(0, 30), min_size=1, max_size=6), world=st.integers(1, 3),
       workers=st.integers(1, 4), batch=st.integers(1, 4), group=st.integers(1, 5),
       tail=st.sampled_from(["drop", "pad"]), shuffle=st.booleans(), data=st.data())
def test_resumed_rank_delivers_the_rest_in_the_same_order(shards: list[int], world: int, workers: int,
                                                          batch: int, group: int, tail: str, shuffle: bool,
                                                          data: st.DataObject) -> None:
    params = PlanParams(seed=1, world_size=world, num_workers=workers, batch_size=batch, tail=tail,
                        shuffle=shuffle, shuffle_window=4)
    plan = build_plan(shards, params)
    for rank in range(world):
        whole = delivered(plan, rank, workers, group)
        cut = data.draw(st.integers(0, len(whole)), label=f"cut of rank {rank}")
        taken = Counter(consumer for consumer, _ in whole[:cut])
        offsets = [taken[c] * batch for c in range(plan.num_consumers)]
        resumed = build_plan(shards, params, plan_to_state(plan, offsets, "xxh64:0"))
        assert delivered(resumed, rank, workers, group) == whole[cut:]
