"""A real DDP training loop (CPU, gloo) streaming a shardkit dataset, with exact resume.

Run (see README)::

    torchrun --nproc_per_node 2 examples/train_ddp.py --data out/ --workers 2 \
        --ckpt-dir ckpt/ --ckpt-every 10 --audit-dir audit/          # kill -9 it at any time
    torchrun --nproc_per_node 3 examples/train_ddp.py --data out/ --workers 1 \
        --ckpt-dir ckpt/ --ckpt-every 10 --audit-dir audit/ --resume # another topology

Every ``--ckpt-every`` steps all ranks call ``loader.state_dict()`` (collective) and rank 0
publishes model + optimizer + loader state atomically: tensors in an ``.npz`` (loaded with
``allow_pickle=False``), everything else in JSON. With ``--audit-dir`` the loader's audit sink
(``ShardLoader(..., audit_dir=)``, specs/resume-state.md R15) records what each rank trained and
the planned drops, so ``shardkit audit AUDIT_DIR --data DATA`` can prove exactly-once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import shardkit as sk


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="dataset folder or URL")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tail", default="drop", choices=("drop", "pad"))
    p.add_argument("--shuffle-window", type=int, default=256)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--cache-limit", default="1GiB")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (e.g. the local test server)")
    p.add_argument("--sample-weights", default=None, help="a numeric field: sample j trained m_j times per epoch")
    p.add_argument("--samples-per-epoch", type=int, default=None, help="a weighted epoch's size (default: N)")
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--audit-dir", default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--step-sleep", type=float, default=0.0, help="simulated compute per step (s)")
    p.add_argument("--max-steps", type=int, default=None, help="stop (cleanly) after this many steps")
    return p.parse_args()


def feature(batch: dict[str, Any]) -> torch.Tensor:
    """A float feature per sample from its global index (works for any dataset)."""
    return (batch["_index"].to(torch.float32) % 97 / 97.0).unsqueeze(1)


def save_checkpoint(ckpt_dir: str, model: torch.nn.Module, opt: torch.optim.Optimizer, meta: dict[str, Any]) -> None:
    """Publish ``ckpt_dir/step-N`` atomically (temp dir + rename), then point ``latest`` at it."""
    name = f"step-{meta['global_step']:08d}"
    tmp = os.path.join(ckpt_dir, f".tmp-{name}-{os.getpid()}")
    os.makedirs(tmp, exist_ok=True)
    tensors = {f"model.{k}": v.detach().numpy() for k, v in model.state_dict().items()}
    for i, state in opt.state_dict()["state"].items():
        for k, v in state.items():
            if torch.is_tensor(v):
                tensors[f"opt.{i}.{k}"] = v.numpy()
    np.savez(os.path.join(tmp, "tensors.npz"), **tensors)
    with open(os.path.join(tmp, "meta.json"), "w") as fh:
        json.dump(meta, fh)
    final = os.path.join(ckpt_dir, name)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    latest_tmp = os.path.join(ckpt_dir, f".latest-{os.getpid()}")
    with open(latest_tmp, "w") as fh:
        fh.write(name)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(latest_tmp, os.path.join(ckpt_dir, "latest"))


def load_checkpoint(ckpt_dir: str, model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any] | None:
    try:
        with open(os.path.join(ckpt_dir, "latest")) as fh:
            path = os.path.join(ckpt_dir, fh.read().strip())
    except FileNotFoundError:
        return None
    with open(os.path.join(path, "meta.json")) as fh:
        meta: dict[str, Any] = json.load(fh)
    with np.load(os.path.join(path, "tensors.npz"), allow_pickle=False) as tensors:
        model.load_state_dict({k[6:]: torch.from_numpy(tensors[k].copy()) for k in tensors if k.startswith("model.")})
        opt_state = opt.state_dict()
        for key in tensors:
            if key.startswith("opt."):
                _, i, name = key.split(".", 2)
                opt_state["state"].setdefault(int(i), {})[name] = torch.from_numpy(tensors[key].copy())
        opt.load_state_dict(opt_state)
    return meta


def next_run_number(audit_dir: str | None, rank: int) -> int:
    """1 + the highest run recorded in the audit folder (rank 0 decides, all ranks agree), for
    examples/train_lm.py, which writes its own audit lines (this loop uses the loader's sink).

    Counted from the folder, not the checkpoint: a restart killed before writing its own
    checkpoint must not share a number with the restart that follows it."""
    number = torch.zeros(1, dtype=torch.int64)
    if rank == 0 and audit_dir and os.path.isdir(audit_dir):
        runs = [int(name[3:6]) for name in os.listdir(audit_dir) if name.startswith("run") and name.endswith(".json")]
        number[0] = max(runs) + 1 if runs else 0
    dist.broadcast(number, src=0)
    return int(number[0])


def end_step(args: argparse.Namespace, loader: sk.ShardLoader, model: DistributedDataParallel,
             opt: torch.optim.Optimizer, meta: dict[str, Any], rank: int) -> None:
    """After training step ``meta["global_step"]``: sleep ``--step-sleep`` seconds, and every
    ``--ckpt-every`` steps checkpoint the model, ``meta`` and the loader state (rank 0 writes)."""
    if args.step_sleep:
        time.sleep(args.step_sleep)
    if meta["global_step"] % args.ckpt_every == 0:
        state = loader.state_dict()  # collective: every rank, same step
        if rank == 0:
            save_checkpoint(args.ckpt_dir, model.module, opt, {**meta, "loader": state})
        dist.barrier()


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    storage_options = {"endpoint_url": args.endpoint_url} if args.endpoint_url else None
    weighted = {"sample_weights": args.sample_weights, "samples_per_epoch": args.samples_per_epoch} \
        if args.sample_weights else {}
    dataset = sk.StreamingDataset(args.data, batch_size=args.batch_size, seed=args.seed, tail=args.tail,
                                  shuffle_window=args.shuffle_window, with_index=True, cache_dir=args.cache_dir,
                                  cache_limit=args.cache_limit, storage_options=storage_options, **weighted)
    loader = sk.ShardLoader(dataset, num_workers=args.workers, persistent_workers=args.workers > 0,
                            audit_dir=args.audit_dir)  # what each rank trained, for shardkit audit
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    meta: dict[str, Any] = {"epoch": 0, "global_step": 0, "run": 0}
    if args.resume:
        loaded = load_checkpoint(args.ckpt_dir, model.module, opt)
        if loaded is not None:
            meta = loaded
            loader.load_state_dict(meta["loader"])
    os.makedirs(args.ckpt_dir, exist_ok=True)
    step = meta["global_step"]
    loss = torch.tensor(float("nan"))
    for epoch in range(meta["epoch"], args.epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            loss = torch.nn.functional.mse_loss(model(feature(batch)), torch.zeros(args.batch_size, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            meta = {"epoch": epoch, "global_step": step, "run": loader.audit_run or 0}  # the launch's number
            end_step(args, loader, model, opt, meta, rank)
            if args.max_steps is not None and step >= args.max_steps:
                break
        if args.max_steps is not None and step >= args.max_steps:
            break
    if rank == 0:
        print(f"rank 0 done: {step} steps, loss {loss.item():.4f}, "
              f"data wait p50 {loader.stats()['wait_p50_s'] * 1e3:.2f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
