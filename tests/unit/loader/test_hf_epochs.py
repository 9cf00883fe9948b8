"""G15's arithmetic (shardkit/loader/hf_epochs.py): the counts ``ShardkitTrainer`` gives
``Trainer`` make ``Trainer``'s own loop — ``epochs_trained = global_step // steps_per_epoch``,
``range(epochs_trained, num_train_epochs)``, a stop at ``max_steps`` — train exactly the loader
epochs left, each to its end, whatever the step counts of the topology that ran before, and
also when later epochs have other lengths than the first (a mixture's, pack mode)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardkit.loader.hf_epochs import planned_steps, trainer_counts, updates


def _trainer_loop(global_step: int, counts, first_batches: int, per_epoch: list[int], first_epoch: int,
                  accumulation: int, epochs: int | None):
    """``Trainer._inner_training_loop``'s epoch and step bookkeeping (transformers 4.57) over the
    loader's epochs, with ``ShardkitTrainer``'s ``max_steps`` refresh at each epoch start (epoch-
    based runs): (loader epoch, updates trained) per epoch the loop entered, and the last step."""
    trained, step, max_steps = [], global_step, counts.max_steps
    start = global_step // counts.num_update_steps_per_epoch
    for k, _ in enumerate(range(start, counts.num_train_epochs)):
        epoch = first_epoch + k
        batches = first_batches if k == 0 else per_epoch[epoch]
        if epochs is not None:
            max_steps = planned_steps(step, batches, epochs - 1 - epoch, per_epoch[first_epoch], accumulation)
        n, done = updates(batches, accumulation), 0
        while done < n and step < max_steps:
            done, step = done + 1, step + 1
        trained.append((epoch, done))
        if step >= max_steps:
            break
    return trained, step


@given(global_step=st.integers(0, 300), first_epoch=st.integers(0, 4), left=st.integers(1, 30),
       per_epoch=st.lists(st.integers(1, 30), min_size=8, max_size=8), epochs=st.integers(1, 6),
       accumulation=st.integers(1, 3))
def test_epoch_based_runs_every_loader_epoch_left_to_its_end(global_step, first_epoch, left, per_epoch, epochs,
                                                             accumulation):
    counts = trainer_counts(global_step, first_epoch, left, per_epoch[first_epoch], epochs, -1, accumulation, 4)
    trained, step = _trainer_loop(global_step, counts, left, per_epoch, first_epoch, accumulation, epochs)
    want = [(e, updates(left if e == first_epoch else per_epoch[e], accumulation)) for e in range(first_epoch, epochs)]
    assert trained == want
    assert step == global_step + sum(n for _, n in want)
    if len(set(per_epoch)) == 1:  # epochs of one length: the first estimate is exact
        assert counts.max_steps == step


@given(global_step=st.integers(0, 100), first_epoch=st.integers(0, 3), left=st.integers(1, 30),
       per_epoch=st.lists(st.integers(1, 30), min_size=300, max_size=300), budget=st.integers(1, 200),
       accumulation=st.integers(1, 3))
def test_max_steps_is_a_budget_of_steps_across_topologies(global_step, first_epoch, left, per_epoch, budget,
                                                          accumulation):
    max_steps = global_step + budget
    counts = trainer_counts(global_step, first_epoch, left, per_epoch[first_epoch], 1, max_steps, accumulation, 4)
    trained, step = _trainer_loop(global_step, counts, left, per_epoch, first_epoch, accumulation, None)
    assert step == max_steps
    assert [e for e, _ in trained] == list(range(first_epoch, first_epoch + len(trained)))
    for (e, n) in trained[:-1]:  # every epoch but the last one is trained to its end
        assert n == updates(left if e == first_epoch else per_epoch[e], accumulation)


def test_a_fractional_num_train_epochs_is_refused() -> None:
    with pytest.raises(ValueError, match="fractional"):
        trainer_counts(0, 0, 10, 10, 1.5, -1, 1, 4)
