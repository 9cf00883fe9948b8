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
  plus the steps left on this topology (:func:`planned_steps`, recomputed at every epoch start;
  the learning-rate schedule is sized by the value at the start of the run, so a resume on
  another topology stretches or shrinks it).
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


def planned_steps(global_step: int, batches_now: int, later_epochs: int, full_batches: int,
                  accumulation: int) -> int:
    """``max_steps`` of an epoch-based run at the start of a loader epoch with ``batches_now``
    batches left on this rank, ``later_epochs`` more to follow of (about) ``full_batches`` each.

    Exact for the epoch under way; later epochs are estimated by a whole epoch of the first one
    (exact for sample datasets and one token dataset in concat mode; a mixture's or a pack-mode
    epoch may differ by a few steps). ``ShardkitTrainer`` recomputes it at every epoch start, so
    in the last epoch it is exact and ``Trainer`` stops at that epoch's end, never before."""
    return global_step + updates(batches_now, accumulation) + later_epochs * updates(full_batches, accumulation)


def trainer_counts(global_step: int, first_epoch: int, first_batches: int, full_batches: int,
                   num_train_epochs: float, max_steps: int, accumulation: int, batch_size: int) -> TrainerCounts:
    """Counts for a run that starts at ``global_step`` with loader epoch ``first_epoch``, of which
    ``first_batches`` batches are left on this rank; ``full_batches``: a whole epoch's on this rank.

    Raises ``ValueError`` for a fractional ``num_train_epochs`` (an epoch is the loader's, whole)."""
    if accumulation < 1:
        raise ValueError(f"gradient_accumulation_steps must be >= 1, got {accumulation}")
    epoch_based = max_steps <= 0
    if epoch_based and num_train_epochs != math.floor(num_train_epochs):
        raise ValueError(f"ShardkitTrainer trains whole loader epochs; num_train_epochs={num_train_epochs} is "
                         "fractional (use max_steps for a part of an epoch)")
    per_epoch = max(updates(full_batches, accumulation), 1)
    if epoch_based:
        epochs = max(int(num_train_epochs) - first_epoch, 0)
        total = global_step
        if epochs:
            total = planned_steps(global_step, first_batches, epochs - 1, full_batches, accumulation)
    else:  # at most one epoch per step left: Trainer's loop stops at max_steps
        epochs, total = max(max_steps - global_step, 0), max_steps
    started = global_step // per_epoch  # Trainer's own epochs_trained
    examples = full_batches * batch_size
    return TrainerCounts(started + epochs, per_epoch, examples, examples * max(epochs, 1), epoch_based, full_batches,
                         total, epochs)
