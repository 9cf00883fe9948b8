"""A tiny Hugging Face ``Trainer`` job under ``torchrun`` (CPU, gloo) over a ShardLoader, for the
kill/resume test. The model is a randomly initialised 2-layer GPT-2 (no downloads).

Samples hold ``tokens`` whose first two ids spell the sample id (``id // 128``, ``id % 128``).
A forward pre-hook on the model checks what reaches ``forward`` (exactly ``input_ids`` and
``labels`` from the batch, plus ``Trainer``'s own ``num_items_in_batch``; ``[batch, 8]``) and
appends ``{"run", "epoch", "step", "ids"}`` to ``AUDIT/runNNN-rankR.jsonl`` (the
``tools/audit.py`` format), flushed before the step's checkpoint can be written; ``step`` is
the global step this batch completes. Nothing here works around the CPU resume under
``torchrun`` (``cpu:N`` optimizer storages): ``ShardkitTrainer`` handles it.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/integration/trainers/hf_train.py \
        --data D --out O --audit-dir A --run-number 0 [--resume]
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

import shardkit as sk
from shardkit.loader.hf import ShardkitTrainer
from tests.helpers.job_args import job_parser

SEQ = 8
VOCAB = 128


def tokens_of(sample_id: int) -> np.ndarray:
    rest = [(sample_id * (k + 3)) % VOCAB for k in range(SEQ - 2)]
    return np.array([sample_id // VOCAB, sample_id % VOCAB, *rest], dtype=np.int64)


def to_inputs(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """The user's collation: token rows → causal-LM inputs."""
    ids = torch.as_tensor(np.stack([s["tokens"] for s in samples]))
    return {"input_ids": ids, "labels": ids.clone()}


class Audit:
    def __init__(self, trainer: ShardkitTrainer, path: str, run: int, batch_size: int, step_sleep: float) -> None:
        self.trainer, self.run, self.batch_size, self.step_sleep = trainer, run, batch_size, step_sleep
        self.file = open(path, "a")  # noqa: SIM115 (kept open for the run)

    def __call__(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not module.training:
            return
        if args or set(kwargs) - {"input_ids", "labels", "num_items_in_batch"} or "input_ids" not in kwargs:
            raise RuntimeError(f"forward got positional {len(args)} and keys {sorted(kwargs)}")
        ids = kwargs["input_ids"]
        if tuple(ids.shape) != (self.batch_size, SEQ):
            raise RuntimeError(f"forward got input_ids of shape {tuple(ids.shape)}")
        sample_ids = (ids[:, 0] * VOCAB + ids[:, 1]).tolist()
        for sid, row in zip(sample_ids, ids.tolist(), strict=True):
            if row != tokens_of(sid).tolist():
                raise RuntimeError(f"row {row} is not sample {sid}")
        state = self.trainer.state
        epoch = self.trainer.train_loader.streaming.epoch
        line = {"run": self.run, "epoch": epoch, "step": state.global_step + 1, "ids": sample_ids}
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()
        time.sleep(self.step_sleep)


def main() -> None:
    p = job_parser("A tiny GPT-2 under transformers' Trainer on shardkit, audited.")
    p.add_argument("--out", required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--save-every", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2))
    dataset = sk.StreamingDataset(args.data, batch_size=args.batch_size, seed=0, tail="drop",
                                  shuffle_window=16, collate_fn=to_inputs)
    loader = sk.ShardLoader(dataset, num_workers=args.workers)
    training = TrainingArguments(
        output_dir=args.out, num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
        save_strategy="steps", save_steps=args.save_every, logging_steps=1000, report_to=[], use_cpu=True,
        ddp_backend="gloo", disable_tqdm=True, seed=0, learning_rate=1e-3, save_safetensors=True,
    )
    trainer = ShardkitTrainer(model=model, args=training, train_loader=loader)
    rank = int(os.environ.get("RANK", "0"))
    os.makedirs(args.audit_dir, exist_ok=True)
    audit = Audit(trainer, os.path.join(args.audit_dir, f"run{args.run_number:03d}-rank{rank}.jsonl"), args.run_number,
                  args.batch_size, args.step_sleep)
    model.register_forward_pre_hook(audit, with_kwargs=True)
    trainer.train(resume_from_checkpoint=True if args.resume else None)


if __name__ == "__main__":
    main()
