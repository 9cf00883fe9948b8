"""Hugging Face ``Trainer`` integration: train from a ``ShardLoader``, resume at the trained boundary.

``Trainer`` builds its own ``DataLoader(train_dataset, batch_size=...)`` and hands it to
``accelerate``, which may dispatch or re-shard an ``IterableDataset`` and fetches one batch ahead.
``ShardkitTrainer`` instead trains from the ``ShardLoader`` it is given, untouched:

- every rank reads only its own consumers (the loader's partition, no dispatch, no re-sharding);
- batches reach ``model.forward`` as the dataset's ``collate_fn`` made them (the loader strips its
  internal key; ``_index`` only with ``with_index=True``), moved to the device by ``Trainer``;
- ``Trainer`` calls ``set_epoch`` at every epoch, so each epoch has its own order;
- each checkpoint folder gets ``shardkit_loader.json`` (the loader state at the consumed boundary,
  which here is the trained one: ``Trainer`` pulls a step's batches only when it trains them),
  written before ``Trainer`` writes the folder's ``trainer_state.json``; ``train(resume_from_checkpoint=...)``
  loads it, and ``ignore_data_skip`` is forced on (skipping batches again would lose them).

::

    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=8, collate_fn=to_inputs), num_workers=2)
    trainer = ShardkitTrainer(model=model, args=TrainingArguments(...), train_loader=loader)
    trainer.train(resume_from_checkpoint=True)  # or None for a fresh run

``transformers`` (and ``accelerate``) are imported only when this module is used.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from types import ModuleType
from typing import Any

from shardkit.errors import StateError
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


class _LoadLoaderState(_tf.TrainerCallback):  # type: ignore[name-defined]
    """Loads the pending checkpoint's loader state once ``Trainer`` has sized the epoch (full
    length) and before it starts iterating; ``Trainer``'s ``set_epoch`` then keeps it."""

    def __init__(self, trainer: ShardkitTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder, self.trainer.shardkit_resume = self.trainer.shardkit_resume, None
        if folder is not None:
            self.trainer.train_loader.load_state_dict(load_checkpoint_state(folder))
            log.info("shardkit: resuming the loader from %s", folder)


class ShardkitTrainer(_tf.Trainer):  # type: ignore[name-defined]
    """``transformers.Trainer`` that trains from ``train_loader`` (a ``ShardLoader``)."""

    def __init__(self, *args: Any, train_loader: ShardLoader, **kwargs: Any) -> None:
        if not isinstance(train_loader, ShardLoader):
            raise TypeError(f"ShardkitTrainer needs train_loader=ShardLoader, got {type(train_loader).__name__}")
        if kwargs.get("train_dataset") is not None:
            raise ValueError("ShardkitTrainer reads train_loader; pass no train_dataset")
        kwargs["train_dataset"] = train_loader.streaming
        super().__init__(*args, **kwargs)
        self.train_loader = train_loader
        self.shardkit_resume: str | None = None
        if not self.args.ignore_data_skip:
            self.args.ignore_data_skip = True  # shardkit resumes at the boundary itself
        self.add_callback(_LoadLoaderState(self))

    def get_train_dataloader(self) -> ShardLoader:
        """The loader itself: not rebuilt, not ``accelerator.prepare``-d (no dispatch, no re-sharding)."""
        return self.train_loader

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        if resume_from_checkpoint is True:
            resume_from_checkpoint = _tf_utils.get_last_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"no checkpoint found in {self.args.output_dir} to resume from")
        self.shardkit_resume = resume_from_checkpoint if isinstance(resume_from_checkpoint, str) else None
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """The loader state first (collective: every rank takes part), then ``Trainer``'s files."""
        state = self.train_loader.state_dict()
        if self.args.should_save:
            name = f"{_tf_utils.PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"  # as Trainer names it
            folder = os.path.join(self._get_output_dir(trial=trial), name)
            os.makedirs(folder, exist_ok=True)
            _write_atomically(os.path.join(folder, STATE_FILE), state)
        super()._save_checkpoint(model, trial)
