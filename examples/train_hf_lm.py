"""A tiny GPT-2 trained with Hugging Face ``Trainer`` (``ShardkitTrainer``) on token blocks,
from one token dataset or a mixture of several, resumable exactly after a kill on any topology.

Run on a dataset (or a mixture file, ``mix.toml``: specs/mixture.md) whose samples hold an
integer array ``tokens`` of ids below ``--vocab``::

    torchrun --nproc_per_node 2 examples/train_hf_lm.py --data mix.toml --seq-len 64 --batch-size 4 \\
        --out run/ --save-every 10 --audit-dir audit/                   # kill -9 it at any time
    torchrun --nproc_per_node 1 examples/train_hf_lm.py --data mix.toml --seq-len 96 --batch-size 2 \\
        --out run/ --save-every 10 --audit-dir audit/ --resume          # other ranks, seq_len, batch
    shardkit audit audit/ --tokens --data mix.toml --epochs 2          # every token trained once?

The label convention (specs/token-blocks.md TB20): ``TokenBlocks(labels="hf")`` — ``labels``
aligned with ``input_ids`` as every ``*ForCausalLM`` expects (its loss shifts them), -100 where
there is no target. ``ShardkitTrainer`` would also move shifted labels to this layout; asking
for it here keeps the batches right for any other Hugging Face loop too. Only the keys
``GPT2LMHeadModel.forward`` names reach it (``input_ids``, ``labels``, ``position_ids``).
Epochs and steps are the loader's (docs/guarantees.md G15): ``--epochs`` whole epochs are
trained, each token of each epoch once, across kills and elastic resumes.

``--audit-dir``: each rank appends one line per optimizer step with the (sample, position) pairs
it trained (and, from a mixture, the tokens per source), for ``shardkit audit --tokens``. On CPU
(gloo) by default; ``--cuda`` trains on the local GPU (nccl).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from typing import Any

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel, TrainerCallback, TrainingArguments

import shardkit as sk
from shardkit.loader.hf import ShardkitTrainer
from shardkit.loader.hf_inputs import ModelInputs, forward_keys


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="dataset folder or URL, or a mixture file (.toml/.json)")
    p.add_argument("--out", required=True, help="Trainer's output_dir (checkpoint-N folders)")
    p.add_argument("--mode", default="concat", choices=("concat", "pack"))
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=4, help="blocks per step and rank")
    p.add_argument("--eos-id", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512, help="model vocabulary: every token id must be below it")
    p.add_argument("--max-positions", type=int, default=1024, help="the model's longest seq_len (any resume)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=int, default=10)
    p.add_argument("--audit-dir", default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--cuda", action="store_true")
    p.add_argument("--step-sleep", type=float, default=0.0, help="simulated extra compute per step (s)")
    return p.parse_args()


class Audit(TrainerCallback):
    """The (sample, position) pairs of each trained step, one JSON line per step and rank, written
    at the step's end — before the checkpoint of that step can be saved."""

    def __init__(self, path: str, run: int, loader: sk.ShardLoader, sources: int, step_sleep: float) -> None:
        self.file = open(path, "a")  # noqa: SIM115 (kept open for the run)
        self.run, self.loader, self.sources, self.step_sleep = run, loader, sources, step_sleep
        self.pairs: list[list[int]] = []
        self.per_source = torch.zeros(sources, dtype=torch.int64)

    def record(self, batch: dict[str, Any]) -> None:
        """A batch the trainer pulled for the step under way (``with_index=True``)."""
        index, offset = batch["_index"].reshape(-1), batch["_token_offset"].reshape(-1)
        real = index >= 0
        self.pairs += torch.stack([index[real], offset[real]], dim=1).tolist()
        if "_source" in batch:
            slots = batch["_source"][batch["_source"] >= 0]
            self.per_source += torch.bincount(slots, minlength=self.sources)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        line: dict[str, Any] = {"run": self.run, "epoch": self.loader.epoch, "step": state.global_step,
                                "pairs": self.pairs}
        if self.sources:
            line["sources"] = self.per_source.tolist()
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()
        self.pairs, self.per_source = [], torch.zeros(self.sources, dtype=torch.int64)
        time.sleep(self.step_sleep)


def last_checkpoint(out: str) -> str | None:
    """The newest complete ``checkpoint-N`` of ``out`` (``Trainer`` writes ``trainer_state.json``
    last, so a folder without it was cut by the kill and is skipped)."""
    found = [(int(m.group(1)), os.path.join(out, name)) for name in (os.listdir(out) if os.path.isdir(out) else [])
             if (m := re.fullmatch(r"checkpoint-(\d+)", name))
             and os.path.isfile(os.path.join(out, name, "trainer_state.json"))]
    return max(found)[1] if found else None


def open_audit(args: argparse.Namespace, loader: sk.ShardLoader, tokens: sk.TokenBlocks,
               resumed_from: int) -> Audit | None:
    if not args.audit_dir:
        return None
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    os.makedirs(args.audit_dir, exist_ok=True)
    runs = [int(m.group(1)) for f in os.listdir(args.audit_dir) if (m := re.match(r"run(\d+)\.json$", f))]
    run = max(runs, default=-1) + 1
    if dist.is_initialized():
        dist.barrier()  # every rank has counted the runs before rank 0 adds this one
    if rank == 0:
        with open(os.path.join(args.audit_dir, f"run{run:03d}.json"), "w") as fh:
            json.dump({"resumed_from_step": resumed_from, "world_size": world, "workers": args.workers,
                       "batch_size": args.batch_size, "seq_len": args.seq_len, "data": args.data, "seed": args.seed,
                       "tokens": {"field": tokens.field, "mode": tokens.mode, "bos_id": tokens.bos_id,
                                  "eos_id": tokens.eos_id}}, fh)
    sources = len(loader.streaming.mixture.sources) if loader.streaming.mixture is not None else 0
    return Audit(os.path.join(args.audit_dir, f"run{run:03d}-rank{rank}.jsonl"), run, loader, sources,
                 args.step_sleep)


def main() -> None:
    args = parse_args()
    training = TrainingArguments(
        output_dir=args.out, num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
        save_strategy="steps", save_steps=args.save_every, logging_steps=50, report_to=[], seed=args.seed,
        use_cpu=not args.cuda, ddp_backend=None if args.cuda else "gloo", disable_tqdm=True, learning_rate=1e-3,
    )
    torch.manual_seed(args.seed)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=args.vocab, n_positions=args.max_positions, n_embd=32, n_layer=2,
                                       n_head=2))
    tokens = sk.TokenBlocks(args.seq_len, mode=args.mode, eos_id=args.eos_id, labels="hf")
    mixture = args.data.endswith((".toml", ".json")) and not args.data.endswith("manifest.json")
    # With tensor/pipeline parallelism, pass the data-parallel group here (README, "An LM example
    # to copy"); TODO(issue 29 item 4, at merge): a --tp option building a DeviceMesh for it.
    provenance = bool(args.audit_dir)  # per slot: _index (and _source for a mixture)
    dataset = sk.StreamingDataset(args.data, batch_size=args.batch_size, seed=args.seed, tail="pad", tokens=tokens,
                                  with_index=provenance, with_source=provenance and mixture)
    loader = sk.ShardLoader(dataset, num_workers=args.workers)
    last = last_checkpoint(args.out) if args.resume else None
    _ = training.device  # joins the process group (torchrun) before the audit counts runs
    audit = open_audit(args, loader, tokens, int(last.rsplit("-", 1)[1]) if last else 0)
    keep = ModelInputs(forward_keys(model))  # the default rule: only the keys forward names

    def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
        if audit is not None:
            audit.record(batch)
        return keep(batch)

    trainer = ShardkitTrainer(model=model, args=training, train_loader=loader, model_inputs=model_inputs,
                              callbacks=[audit] if audit is not None else None)
    result = trainer.train(resume_from_checkpoint=last)
    if training.process_index == 0:
        stats = loader.stats()
        print(f"rank 0 done: step {trainer.state.global_step}, loss {result.training_loss:.4f}, "
              f"{stats.get('tokens_per_s', 0.0):.0f} effective tokens/s", flush=True)
        if "sources" in stats:
            print(f"rank 0 per source: {json.dumps(stats['sources'])}", flush=True)


if __name__ == "__main__":
    main()
