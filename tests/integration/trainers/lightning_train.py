"""A tiny Lightning DDP job (CPU, gloo, 2 processes) over a ShardLoader, for the kill/resume test.

Each training step appends ``{"run", "epoch", "step", "ids"}`` to ``AUDIT/runNNN-rankR.jsonl``
(flushed before the step's checkpoint can be written), the format ``tools/audit.py`` reads;
``step`` is the global step this batch completes. ``--unsized`` hides ``len()`` from Lightning,
which then fetches one batch ahead (with a length, Lightning 2.6 does not). ``--raw`` hands
Lightning the bare loader instead of the callback's wrapper (to see what the integration fixes).

    python tests/integration/trainers/lightning_train.py --data D --ckpt-dir C --audit-dir A --run-number 0 \
        [--ckpt PATH]
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

import shardkit as sk
from shardkit.loader.lightning import ShardkitCallback
from tests.helpers.job_args import job_parser


class Unsized:
    """The loader behind an iterable without ``len()`` (as a user's own wrapper may be): Lightning
    then fetches one batch ahead of the training step. State calls pass through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __iter__(self) -> Any:
        return iter(self.inner)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


class Tiny(pl.LightningModule):
    def __init__(self, audit_dir: str, run: int, step_sleep: float) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.audit_dir, self.run, self.step_sleep = audit_dir, run, step_sleep
        self._audit: Any = None

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self._audit is None:
            path = os.path.join(self.audit_dir, f"run{self.run:03d}-rank{self.global_rank}.jsonl")
            self._audit = open(path, "a")  # noqa: SIM115 (kept open for the run)
        index = batch["_index"]
        real = index[~batch["_padded"]] if "_padded" in batch else index
        line = {"run": self.run, "epoch": self.current_epoch, "step": self.global_step + 1, "ids": real.tolist()}
        self._audit.write(json.dumps(line) + "\n")
        self._audit.flush()
        time.sleep(self.step_sleep)
        x = (index.to(torch.float32) % 97 / 97.0).unsqueeze(1)
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    p = job_parser("A tiny model under Lightning DDP on shardkit, audited.")
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--ckpt", default=None)
    p.add_argument("--ckpt-every", type=int, default=3)
    p.add_argument("--raw", action="store_true")
    p.add_argument("--unsized", action="store_true")
    args = p.parse_args()
    os.makedirs(args.audit_dir, exist_ok=True)
    dataset = sk.StreamingDataset(args.data, batch_size=args.batch_size, seed=0, tail="pad",
                                  shuffle_window=16, with_index=True)
    loader = sk.ShardLoader(dataset, num_workers=args.workers)
    shardkit_cb = ShardkitCallback(loader)
    checkpoints = ModelCheckpoint(dirpath=args.ckpt_dir, filename="{step}", every_n_train_steps=args.ckpt_every,
                                  save_top_k=-1)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=args.epochs,
                         callbacks=[shardkit_cb, checkpoints], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, use_distributed_sampler=False)
    train: Any = loader if args.raw else shardkit_cb.train_dataloader()
    if args.unsized:
        train = Unsized(train)
    trainer.fit(Tiny(args.audit_dir, args.run_number, args.step_sleep), train_dataloaders=train, ckpt_path=args.ckpt)


if __name__ == "__main__":
    main()
