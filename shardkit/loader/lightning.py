"""Lightning integration: a new order every epoch and checkpoints at the *trained* boundary.

Lightning's fit loop fetches one batch ahead of the training step (to know which batch is the
last), so ``ShardLoader.state_dict()`` taken in a hook counts a batch the model has not trained on
yet, and a resume would skip it. ``ShardkitCallback`` wraps the loader: the wrapper records the
loader's consumed boundary as each batch is handed to Lightning, the callback counts the batches
the training step actually started, and the state Lightning saves (the wrapper is ``Stateful``, so
Lightning stores it in the checkpoint's fit-loop state and restores it on ``ckpt_path=``) is the
boundary of the last batch trained. The wrapper also sets the loader's epoch to
``trainer.current_epoch`` at every ``iter()``, so each epoch gets its own order::

    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=64), num_workers=4)
    shardkit_cb = ShardkitCallback(loader)
    trainer = L.Trainer(callbacks=[shardkit_cb, ModelCheckpoint(every_n_train_steps=500)])
    trainer.fit(model, train_dataloaders=shardkit_cb.train_dataloader(), ckpt_path=last_or_none)

``lightning`` (or ``pytorch_lightning``) is imported only when this module is used.
"""

from __future__ import annotations

import collections
import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from shardkit.errors import StateError
from shardkit.loader.shard_loader import ShardLoader

Snapshot = tuple[dict[int, int], int]


def _lightning() -> ModuleType:
    """``lightning.pytorch`` (or the older ``pytorch_lightning``), with an install hint if neither is there."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("shardkit.loader.lightning needs Lightning: pip install lightning")


class TrainedBoundaryLoader:
    """What Lightning iterates: the loader's batches, plus the boundary after each one.

    ``state_dict()`` is the loader state after the last batch the training step started (counted
    by ``ShardkitCallback``), not after the batch Lightning has already fetched ahead. Collective
    when distributed, like ``ShardLoader.state_dict`` (Lightning calls it on every rank)."""

    def __init__(self, loader: ShardLoader, callback: ShardkitCallback) -> None:
        self.loader = loader
        self._callback = callback
        self._start: Snapshot = loader.consumed_snapshot()
        self._after: collections.deque[tuple[int, Snapshot]] = collections.deque()  # (yield number, boundary)
        self._yielded = 0
        self.received = 0  # batches the training step has started in this iteration

    def __len__(self) -> int:
        """Batches of the whole epoch on this rank (Lightning counts resumed batches itself)."""
        return self.loader.epoch_batches(self.loader.streaming.epoch)

    def __iter__(self) -> Iterator[Any]:
        self._sync_epoch()
        batches = iter(self.loader)
        self._restart()
        return self._record(batches)

    def _restart(self) -> None:
        self._start, self._after = self.loader.consumed_snapshot(), collections.deque()
        self._yielded = self.received = 0

    def _sync_epoch(self) -> None:
        trainer = self._callback.trainer
        if trainer is None:
            raise StateError(
                "the shardkit Lightning loader was iterated outside a Trainer that has its callback: "
                "pass Trainer(callbacks=[shardkit_cb]) and train_dataloaders=shardkit_cb.train_dataloader()"
            )
        epoch = int(trainer.current_epoch)
        # Always: a pending resume of this epoch is kept, and a state saved at this epoch's end
        # then yields nothing rather than advancing to the next epoch on its own (R10). The trainer's
        # epoch wins over a loaded state of another one (e.g. one left by limit_train_batches): R21.
        self.loader.set_epoch(epoch, drop_loaded=True)

    def _record(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            self._yielded += 1
            self._after.append((self._yielded, self.loader.consumed_snapshot()))
            yield batch

    def trained_snapshot(self) -> Snapshot:
        """The consumed boundary after the ``received``-th batch of this iteration."""
        while self._after and self._after[0][0] < self.received:
            self._after.popleft()  # boundaries the training step is past: never asked for again
        if self.received == 0:
            return self._start
        if not self._after or self._after[0][0] != self.received:
            raise StateError(f"shardkit Lightning loader: no boundary recorded for batch {self.received}")
        return self._after[0][1]

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict(self.trained_snapshot())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
        self._restart()


def _callback_base() -> type:
    return _lightning().Callback


class ShardkitCallback(_callback_base()):  # type: ignore[misc]
    """Counts the batches the training step starts; add it to ``Trainer(callbacks=...)``.

    ``train_dataloader()`` gives the iterable to hand to ``trainer.fit`` (or to return from
    ``LightningModule.train_dataloader``)."""

    def __init__(self, loader: ShardLoader) -> None:
        super().__init__()
        if not isinstance(loader, ShardLoader):
            raise TypeError(f"ShardkitCallback needs a ShardLoader, got {type(loader).__name__}")
        self.trainer: Any = None
        self.tracked = TrainedBoundaryLoader(loader, self)

    def train_dataloader(self) -> TrainedBoundaryLoader:
        return self.tracked

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.trainer = trainer

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Lightning restores the dataloader states of a checkpoint before this hook, exactly when
        its fit loop is restarting (an unfinished epoch, or step-based training): then the loader
        must have been given a state (R21; an epoch-end checkpoint restores none)."""
        if getattr(getattr(trainer, "fit_loop", None), "restarting", False):
            self.tracked.loader.expect_resume()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.tracked.received += 1
