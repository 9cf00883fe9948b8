"""A tiny GPT trained on read-time token blocks (CPU, gloo, torchrun), with exact elastic resume.

Run on a dataset whose samples hold an integer array ``tokens``::

    torchrun --nproc_per_node 2 examples/train_lm.py --data out/ --seq-len 64 --batch-size 4 \
        --ckpt-dir ckpt/ --ckpt-every 10 --audit-dir audit/          # kill -9 it at any time
    torchrun --nproc_per_node 1 examples/train_lm.py --data out/ --seq-len 96 --batch-size 2 \
        --ckpt-dir ckpt/ --ckpt-every 10 --audit-dir audit/ --resume # other ranks, seq_len, batch
    shardkit audit audit/ --tokens --data out/                        # every token trained once?

``--data`` may also be a mixture file (``mix.toml``: sources, weights — in tokens with
``weight_unit = "tokens"`` — and ``samples_per_epoch``; specs/mixture.md): the blocks are then
cut from the mixture's epoch documents (specs/token-blocks.md TB15), each batch carries the
source of every slot (``_source``), rank 0 prints the tokens trained per source, and the audit
checks every token of every source's share of the epoch.

Batches are ``sk.TokenBlocks`` blocks (specs/token-blocks.md): ``input_ids``, shifted ``labels``
(-100: no loss), ``position_ids`` restarting at every document — used here both as position
embeddings and to keep attention inside a document. Token ids are taken modulo ``--vocab`` so
any token dataset works. Checkpoints are those of ``examples/train_ddp.py`` (tensors in
``.npz``, the loader state in JSON); each rank appends one audit line per step with the
(sample, position) pairs it trained, for ``shardkit audit --tokens``.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from train_ddp import end_step, load_checkpoint, next_run_number  # the same checkpoint format

import shardkit as sk


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="dataset folder or URL, or a mixture file (.toml/.json)")
    p.add_argument("--field", default="tokens")
    p.add_argument("--mode", default="concat", choices=("concat", "pack"))
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=4, help="blocks per step and rank")
    p.add_argument("--eos-id", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--audit-dir", default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--step-sleep", type=float, default=0.0, help="simulated extra compute per step (s)")
    return p.parse_args()


class TinyGPT(nn.Module):
    """Token + position embeddings, ``layers`` causal transformer layers, a linear LM head."""

    def __init__(self, vocab: int, max_positions: int, width: int = 32, layers: int = 2, heads: int = 2) -> None:
        super().__init__()
        self.vocab, self.heads = vocab, heads
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(max_positions, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        positions = position_ids.clamp(max=self.positions.num_embeddings - 1)
        x = self.tokens(input_ids % self.vocab) + self.positions(positions)
        hidden = self.body(x, mask=document_mask(position_ids).repeat_interleave(self.heads, dim=0))
        return self.head(hidden)


def document_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """(B, L, L) bool, True where attention is *not* allowed: later slots, or another row
    segment (a new segment starts wherever ``position_ids`` is 0)."""
    segment = torch.cumsum(position_ids == 0, dim=1)
    length = position_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).triu(1)
    return causal | (segment.unsqueeze(2) != segment.unsqueeze(1))


def trained_pairs(batch: dict[str, Any]) -> list[list[int]]:
    """(global sample index, segment position) of every non-padding input (with_index=True)."""
    index, offset = batch["_index"].reshape(-1), batch["_token_offset"].reshape(-1)
    real = index >= 0
    return torch.stack([index[real], offset[real]], dim=1).tolist()


def open_audit(args: argparse.Namespace, run: int, rank: int, world: int, meta: dict[str, Any],
               tokens: sk.TokenBlocks) -> Any:
    if not args.audit_dir:
        return None
    os.makedirs(args.audit_dir, exist_ok=True)
    if rank == 0:
        with open(os.path.join(args.audit_dir, f"run{run:03d}.json"), "w") as fh:
            json.dump({"resumed_from_step": meta["global_step"], "world_size": world, "workers": args.workers,
                       "batch_size": args.batch_size, "seq_len": args.seq_len, "data": args.data, "seed": args.seed,
                       "tokens": {"field": tokens.field, "mode": tokens.mode, "bos_id": tokens.bos_id,
                                  "eos_id": tokens.eos_id}}, fh)
    return open(os.path.join(args.audit_dir, f"run{run:03d}-rank{rank}.jsonl"), "a")


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    tokens = sk.TokenBlocks(args.seq_len, field=args.field, mode=args.mode, eos_id=args.eos_id)
    mixture = args.data.endswith((".toml", ".json")) and not args.data.endswith("manifest.json")  # a mixture file
    dataset = sk.StreamingDataset(args.data, batch_size=args.batch_size, seed=args.seed, tail="pad",
                                  tokens=tokens, with_index=True, with_source=mixture)
    loader = sk.ShardLoader(dataset, num_workers=args.workers)
    sources = len(dataset.mixture.sources) if dataset.mixture is not None else 0
    model = DistributedDataParallel(TinyGPT(args.vocab, max_positions=1024))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    meta: dict[str, Any] = {"epoch": 0, "global_step": 0, "run": 0}
    if args.resume and (loaded := load_checkpoint(args.ckpt_dir, model.module, opt)) is not None:
        meta = loaded
        loader.load_state_dict(meta["loader"])  # elastic: other ranks, seq_len, batch size (TB8)
    run = next_run_number(args.audit_dir, rank)
    audit = open_audit(args, run, rank, world, meta, tokens)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    step, loss = meta["global_step"], torch.tensor(float("nan"))
    for epoch in range(meta["epoch"], args.epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            loss = lm_loss(model, args.vocab, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if audit is not None:
                line = {"run": run, "epoch": epoch, "step": step, "pairs": trained_pairs(batch)}
                if "_source" in batch:  # tokens trained per source this step (a mixture)
                    slots = batch["_source"][batch["_source"] >= 0]
                    line["sources"] = torch.bincount(slots, minlength=sources).tolist()
                audit.write(json.dumps(line) + "\n")
                audit.flush()
            end_step(args, loader, model, opt, {"epoch": epoch, "global_step": step, "run": run}, rank)
    if rank == 0:
        stats = loader.stats()
        print(f"rank 0 done: {step} steps, loss {loss.item():.4f}, "
              f"{stats.get('tokens_per_s', 0.0):.0f} effective tokens/s", flush=True)
        if "sources" in stats:  # this rank, this iteration: documents started and tokens per source
            print(f"rank 0 per source: {json.dumps(stats['sources'])}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def lm_loss(model: nn.Module, vocab: int, batch: dict[str, Any]) -> torch.Tensor:
    """Next-token cross-entropy through the DDP wrapper (gradients all-reduced); -100: no loss."""
    logits = model(batch["input_ids"], batch["position_ids"])
    labels = batch["labels"]
    targets = torch.where(labels >= 0, labels % vocab, labels)
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


if __name__ == "__main__":
    main()
