"""A training loop over a mixture (CPU, one process): 70/20/10 % of three datasets, exact per
epoch, checkpointed mid-epoch and resumed with another batch size and worker count.

    python examples/train_mixture.py mix.toml        # a mixture file (specs/mixture.md)
    python examples/train_mixture.py                 # makes three small datasets in a temp folder

Prints, per epoch, the samples trained from each source (``batch["_source"]``) next to the
epoch's planned counts: they are equal, resume or not.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import numpy as np
import torch

import shardkit as sk


def make_mixture(root: str) -> sk.Mixture:
    rng = np.random.default_rng(0)
    sources = []
    for name, size, weight in (("web", 900, 0.7), ("code", 300, 0.2), ("math", 40, 0.1)):
        with sk.ShardWriter(f"{root}/{name}", shard_size="64KiB") as writer:
            for i in range(size):
                writer.write({"x": rng.normal(size=8).astype(np.float32), "y": np.float32(i % 7)})
        sources.append(sk.Source(f"{root}/{name}", weight, name))
    return sk.Mixture(sources, samples_per_epoch=1000, composition="stratified")


def loader_for(mixture: sk.Mixture, batch_size: int, workers: int) -> sk.ShardLoader:
    dataset = sk.MixtureDataset(mixture, batch_size=batch_size, seed=0, with_source=True)
    return sk.ShardLoader(dataset, num_workers=workers)


def train(loader: sk.ShardLoader, model: torch.nn.Module, epoch: int, counts: np.ndarray,
          stop_after: int | None = None) -> dict | None:
    """Train until the epoch ends (returns None) or ``stop_after`` steps (returns the state)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader.set_epoch(epoch)
    for step, batch in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(batch["x"]).squeeze(1), batch["y"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        counts += np.bincount(batch["_source"].numpy(), minlength=len(counts))
        if stop_after is not None and step + 1 == stop_after:
            return json.loads(json.dumps(loader.state_dict()))  # what a checkpoint would store
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mixture", nargs="?", help="mixture .toml/.json (default: a generated one)")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        mixture = sk.load_mixture(args.mixture) if args.mixture else make_mixture(root)
        model = torch.nn.Linear(8, 1)
        names = [source.label for source in mixture.sources]
        for epoch in range(args.epochs):
            counts = np.zeros(len(names), dtype=np.int64)
            first = loader_for(mixture, batch_size=16, workers=0)
            state = train(first, model, epoch, counts, stop_after=20)  # "killed" after 20 steps
            if state is not None:  # resume elsewhere: batch 10, two workers
                resumed = loader_for(mixture, batch_size=10, workers=2)
                resumed.load_state_dict(state)
                train(resumed, model, epoch, counts)
            plan = first.streaming.spec.counts(epoch)
            print(f"epoch {epoch}: trained {dict(zip(names, counts.tolist(), strict=True))}, "
                  f"planned {dict(zip(names, plan.tolist(), strict=True))} (drop tail < ranks x batch)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
