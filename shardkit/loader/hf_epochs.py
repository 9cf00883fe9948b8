"""How many steps and epochs ``ShardkitTrainer`` runs, from the loader, never from ``global_step``
(docs/guarantees.md G15). Pure arithmetic: no torch, no transformers.

``transformers.Trainer`` sizes a run as if every epoch had the steps of the current topology: it
resumes at epoch ``global_step // steps_per_epoch`` and stops at ``num_train_epochs ×
steps_per_epoch`` steps. After an elastic resume (other ranks, ``seq_len`` or batch size) the
steps already taken were steps of another topology, so both are wrong and data is lost or
trained twice. Here the epochs come from the loader: the run continues the epoch of the loaded
state (or starts the next one if that epoch had ended) and counts, epoch by epoch, the steps
this topology needs:

- ``num_train_epochs = E`` (``max_steps <= 0``): every loader epoch up to ``E - 1`` is trained to
  its end, whatever topology trains which part; ``max_steps`` becomes the steps taken so far
  plus the steps left on this topology (the learning-rate schedule is stretched or shrunk to
  it at a resume).
- ``max_steps = N > 0``: ``N`` optimizer steps in all (``global_step`` counts them across
  topologies); epochs follow one another as the loader's epochs end. A step on more ranks
  reads more data: ``N`` counts steps, not samples.

``TrainerCounts`` are the values ``Trainer.set_initial_training_values`` returns; its own loop
computes ``epochs_trained = global_step // num_update_steps_per_epoch`` and runs
``range(epochs_trained, num_train_epochs)``, so ``num_train_epochs`` here is that start plus the
number of loader epochs to run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class TrainerCounts:
    """What ``Trainer`` sizes its loop by (``set_initial_training_values``' tuple, in order)."""

    num_train_epochs: int  # the bound of Trainer's epoch loop (its start + epochs to run)
    num_update_steps_per_epoch: int
    num_examples: int
    num_train_samples: int
    epoch_based: bool
    len_dataloader: int
    max_steps: int
    epochs_to_run: int  # loader epochs this run trains (first_epoch, first_epoch + 1, ...)

    def as_tuple(self) -> tuple[int, int, int, int, bool, int, int]:
        return (self.num_train_epochs, self.num_update_steps_per_epoch, self.num_examples, self.num_train_samples,
                self.epoch_based, self.len_dataloader, self.max_steps)


def updates(num_batches: int, accumulation: int) -> int:
    """Optimizer steps for ``num_batches`` batches (``Trainer``: a partial last accumulation counts)."""
    return -(-num_batches // accumulation)


def trainer_counts(global_step: int, first_epoch: int, first_batches: int, epoch_batches: Callable[[int], int],
                   num_train_epochs: float, max_steps: int, accumulation: int, batch_size: int) -> TrainerCounts:
    """Counts for a run that starts at ``global_step`` with loader epoch ``first_epoch``, of which
    ``first_batches`` batches are left on this rank; ``epoch_batches(e)`` is a whole epoch's.

    Raises ``ValueError`` for a fractional ``num_train_epochs`` (an epoch is the loader's, whole)."""
    if accumulation < 1:
        raise ValueError(f"gradient_accumulation_steps must be >= 1, got {accumulation}")
    epoch_based = max_steps <= 0
    if epoch_based and num_train_epochs != math.floor(num_train_epochs):
        raise ValueError(f"ShardkitTrainer trains whole loader epochs; num_train_epochs={num_train_epochs} is "
                         "fractional (use max_steps for a part of an epoch)")
    per_epoch = max(updates(epoch_batches(first_epoch), accumulation), 1)
    steps = [updates(first_batches, accumulation)]  # per loader epoch to run, from first_epoch on
    if epoch_based:
        steps += [updates(epoch_batches(e), accumulation) for e in range(first_epoch + 1, int(num_train_epochs))]
        steps = steps[: max(int(num_train_epochs) - first_epoch, 0)]
        total = global_step + sum(steps)
    else:
        left = max_steps - global_step
        while sum(steps) < left and steps[-1] > 0:
            steps.append(updates(epoch_batches(first_epoch + len(steps)), accumulation))
        steps = steps if left > 0 else []
        total = max_steps
    started = global_step // per_epoch  # Trainer's own epochs_trained
    examples = epoch_batches(first_epoch) * batch_size
    return TrainerCounts(started + len(steps), per_epoch, examples, examples * max(len(steps), 1), epoch_based,
                         epoch_batches(first_epoch), total, len(steps))
