"""Hugging Face ``Trainer`` integration: train from a ``ShardLoader``, resume at the trained boundary.

``Trainer`` builds its own ``DataLoader(train_dataset, batch_size=...)`` and hands it to
``accelerate``, which may dispatch or re-shard an ``IterableDataset`` and fetches one batch ahead.
``ShardkitTrainer`` instead trains from the ``ShardLoader`` it is given, untouched:

- every rank reads only its own consumers (the loader's partition, no dispatch, no re-sharding);
- batches reach ``model.forward`` with only the keys it names, token-block labels in the
  Hugging Face layout (loader/hf_inputs.py, TB20; ``model_inputs=`` replaces the key rule),
  moved to the device by ``Trainer``;
- epochs and steps are the loader's (loader/hf_epochs.py, G15): a run continues the epoch of
  the loaded state on any topology, and ``num_train_epochs`` / ``max_steps`` keep their meaning
  across elastic resumes; each epoch has its own order;
- each checkpoint folder gets ``shardkit_loader.json`` (the loader state at the consumed boundary,
  which here is the trained one: ``Trainer`` pulls a step's batches only when it trains them),
  written before ``Trainer`` writes the folder's ``trainer_state.json``; ``train(resume_from_checkpoint=...)``
  loads it, and ``ignore_data_skip`` is forced on (skipping batches again would lose them);
- on CPU under ``torchrun`` the optimizer state resumes (``Trainer`` maps it to ``cpu:N``,
  which torch does not restore; :func:`_restore_cpu_n`).

::

    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=8, tokens=sk.TokenBlocks(1024, eos_id=eos)))
    trainer = ShardkitTrainer(model=model, args=TrainingArguments(...), train_loader=loader)
    trainer.train(resume_from_checkpoint=True)  # or None for a fresh run

``transformers`` (and ``accelerate``) are imported only when this module is used.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

from shardkit.errors import StateError
from shardkit.loader.hf_epochs import planned_steps, trainer_counts
from shardkit.loader.hf_inputs import InputsHook, ModelInputs, check_for_hf, forward_keys, in_hf_layout, token_blocks_of
from shardkit.loader.shard_loader import ShardLoader

log = logging.getLogger(__name__)
STATE_FILE = "shardkit_loader.json"


def _transformers() -> ModuleType:
    try:
        return importlib.import_module("transformers")
    except ImportError as exc:
        raise ImportError("shardkit.loader.hf needs transformers: pip install transformers accelerate") from exc


_tf = _transformers()
_tf_utils = importlib.import_module("transformers.trainer_utils")


def load_checkpoint_state(folder: str) -> dict[str, Any]:
    """The loader state saved in a ``Trainer`` checkpoint folder; a clear error if it has none."""
    path = os.path.join(folder, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
    except FileNotFoundError:
        raise StateError(f"{folder}: no {STATE_FILE}; this checkpoint was not written by ShardkitTrainer") from None
    except (OSError, ValueError) as exc:
        raise StateError(f"{path}: unreadable shardkit loader state ({exc})") from exc
    if not isinstance(state, dict):
        raise StateError(f"{path}: a shardkit loader state must be a JSON object")
    return state


def _write_atomically(path: str, state: dict[str, Any]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _restore_cpu_n(storage: Any, location: str) -> Any:
    """``Trainer`` resumes the optimizer with ``map_location=args.device``, which in a
    multi-process CPU run is ``cpu:N``, a location torch does not restore ("don't know how to
    restore data location ... cpu:0"): keep such storages on the CPU. Registered once, on the
    first resume; other locations are left to torch."""
    return storage if location.startswith("cpu:") else None


_CPU_N_REGISTERED: list[bool] = []


def _allow_cpu_n_locations() -> None:
    if not _CPU_N_REGISTERED:
        torch.serialization.register_package(5, lambda obj: None, _restore_cpu_n)
        _CPU_N_REGISTERED.append(True)


class _TrainerEpochs:
    """What ``Trainer`` iterates: the loader's epochs in order, batches through ``prepare``.

    ``Trainer`` calls ``set_epoch(i)`` with its own loop index; the loader epoch trained is the
    one the loader's next iteration reads at the first call (the loaded state's, kept), then one
    more per call. ``len`` is the loader's: what is left of a resumed epoch, else a whole one."""

    def __init__(self, loader: ShardLoader, prepare: Any, started: Any) -> None:
        self.loader, self.prepare, self.started = loader, prepare, started
        self.epoch: int | None = None  # the loader epoch of Trainer's current epoch
        self.trainer_epoch = 0  # Trainer's loop index for it

    def set_epoch(self, trainer_epoch: int) -> None:
        target = self.loader.next_epoch if self.epoch is None else self.epoch + 1
        if target != self.loader.next_epoch:  # the last iteration was not run to StopIteration
            self.loader.set_epoch(target)
        self.epoch, self.trainer_epoch = target, trainer_epoch
        self.started(target)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        return (self.prepare(batch) for batch in self.loader)


class _Accounting(_tf.TrainerCallback):  # type: ignore[name-defined]
    """Keeps ``Trainer``'s reported epoch the loader's (``state.epoch``, ``num_train_epochs``)."""

    def __init__(self, trainer: ShardkitTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if args.max_steps <= 0:
            state.num_train_epochs = int(args.num_train_epochs)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        epochs = self.trainer.epochs
        if epochs.epoch is not None:
            state.epoch = epochs.epoch + (state.epoch - epochs.trainer_epoch)


class ShardkitTrainer(_tf.Trainer):  # type: ignore[name-defined]
    """``transformers.Trainer`` that trains from ``train_loader`` (a ``ShardLoader``).

    ``model_inputs``: batch → ``forward`` keyword arguments (default: the keys ``forward``
    names; loader/hf_inputs.py). Epochs and steps: loader/hf_epochs.py."""

    def __init__(self, *args: Any, train_loader: ShardLoader, model_inputs: InputsHook | None = None,
                 **kwargs: Any) -> None:
        if not isinstance(train_loader, ShardLoader):
            raise TypeError(f"ShardkitTrainer needs train_loader=ShardLoader, got {type(train_loader).__name__}")
        if kwargs.get("train_dataset") is not None:
            raise ValueError("ShardkitTrainer reads train_loader; pass no train_dataset")
        self.tokens = token_blocks_of(train_loader.streaming)
        check_for_hf(self.tokens)
        kwargs["train_dataset"] = train_loader.streaming
        super().__init__(*args, **kwargs)
        self.train_loader = train_loader
        self.model_inputs = model_inputs or ModelInputs(forward_keys(self.model))
        self.epochs = _TrainerEpochs(train_loader, self._prepare_batch, self._epoch_started)
        self._full_batches = 0
        if self.args.include_tokens_per_second:  # Trainer would iterate a whole epoch to count them
            raise ValueError("ShardkitTrainer: include_tokens_per_second reads an epoch ahead of training; "
                             "train_loader.stats()['tokens_per_s'] reports token blocks' throughput")
        if not self.args.ignore_data_skip:
            self.args.ignore_data_skip = True  # shardkit resumes at the boundary itself
        self.add_callback(_Accounting(self))
        self._resume_step = 0
        # TODO(issue 29 item 4, data-parallel groups): with tensor/pipeline parallelism the loader
        # partitions over the data-parallel group (StreamingDataset's dp argument); Trainer's own
        # world (args.world_size, its num_items_in_batch gather) still spans every rank. Nothing
        # here reads rank or world: epoch_batches/len/state_dict are the loader's, over its group.

    def _epoch_started(self, epoch: int) -> None:
        """An epoch-based run's ``max_steps`` at the start of loader epoch ``epoch``: exact for it
        (``planned_steps``), so the last epoch ends at ``max_steps``, never before its end."""
        if self.args.max_steps <= 0 and self.state.max_steps:
            later = max(int(self.args.num_train_epochs) - 1 - epoch, 0)
            self.state.max_steps = planned_steps(self.state.global_step, len(self.train_loader), later,
                                                 self._full_batches, self.args.gradient_accumulation_steps)

    def _prepare_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        return self.model_inputs(in_hf_layout(batch, self.tokens))

    def get_train_dataloader(self) -> _TrainerEpochs:
        """The loader's epochs, not rebuilt, not ``accelerator.prepare``-d (no dispatch, no re-sharding)."""
        return self.epochs

    def set_initial_training_values(self, args: Any, dataloader: Any, total_train_batch_size: int) -> tuple[Any, ...]:
        """Epochs and steps from the loader (loader/hf_epochs.py), not ``global_step // len``."""
        loader = self.train_loader
        first = loader.next_epoch
        self._full_batches = loader.epoch_batches(first)
        counts = trainer_counts(self._resume_step, first, len(loader), self._full_batches, args.num_train_epochs,
                                args.max_steps, args.gradient_accumulation_steps, total_train_batch_size)
        log.info("shardkit: loader epoch %d on, %d epoch(s), %d steps in all (from step %d)", first,
                 counts.epochs_to_run, counts.max_steps, self._resume_step)
        return counts.as_tuple()

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        if resume_from_checkpoint is True:
            resume_from_checkpoint = _tf_utils.get_last_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"no checkpoint found in {self.args.output_dir} to resume from")
        self._resume_step = 0
        if isinstance(resume_from_checkpoint, str):
            self.train_loader.load_state_dict(load_checkpoint_state(resume_from_checkpoint))
            self._resume_step = _global_step(resume_from_checkpoint)
            log.info("shardkit: resuming the loader from %s", resume_from_checkpoint)
        self.epochs.epoch = None
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is not None and self.args.device.type == "cpu":
            _allow_cpu_n_locations()
        super()._load_optimizer_and_scheduler(checkpoint)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """The loader state first (collective: every rank takes part), then ``Trainer``'s files."""
        state = self.train_loader.state_dict()
        if self.args.should_save:
            name = f"{_tf_utils.PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"  # as Trainer names it
            folder = os.path.join(self._get_output_dir(trial=trial), name)
            os.makedirs(folder, exist_ok=True)
            _write_atomically(os.path.join(folder, STATE_FILE), state)
        super()._save_checkpoint(model, trial)


def _global_step(folder: str) -> int:
    """``global_step`` of the checkpoint's ``trainer_state.json`` (0 if it has none)."""
    path = os.path.join(folder, _tf.trainer.TRAINER_STATE_NAME)
    if not os.path.isfile(path):
        return 0
    return int(_tf.TrainerState.load_from_json(path).global_step)
