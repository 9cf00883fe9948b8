"""A training loop over a mixture (CPU, one process): 70/20/10 % of three datasets, exact per
epoch, checkpointed mid-epoch and resumed with another batch size, worker count *and new
weights*: by default they take effect at the next epoch (the started epoch finishes as
planned); with ``--apply-mix now`` the rest of the started epoch is re-planned with them.

    python examples/train_mixture.py mix.toml        # a mixture file (specs/mixture.md)
    python examples/train_mixture.py --apply-mix now # new weights for the rest of epoch 0 too
    python examples/train_mixture.py                 # makes three small datasets and a mix.toml
    python examples/train_mixture.py --out DIR       # ... in DIR (kept), e.g. for `shardkit plan`

Prints, per epoch, the samples trained from each source (``batch["_source"]``) next to the
epoch's planned counts, and what the loader state and ``loader.stats()`` counted: all equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile

import numpy as np
import torch

import shardkit as sk

MIX_TOML = """samples_per_epoch = 1000
composition = "stratified"
{sources}"""


def make_mixture(root: str) -> str:
    """Three small datasets and the mixture file naming them; returns the file's path."""
    rng = np.random.default_rng(0)
    entries = []
    for name, size, weight in (("web", 900, 0.7), ("code", 300, 0.2), ("math", 40, 0.1)):
        with sk.ShardWriter(f"{root}/{name}", shard_size="64KiB") as writer:
            for i in range(size):
                writer.write({"x": rng.normal(size=8).astype(np.float32), "y": np.float32(i % 7)})
        entries.append(f'\n[[sources]]\npath = "{name}"\nweight = {weight}\n')
    path = os.path.join(root, "mix.toml")
    with open(path, "w") as fh:
        fh.write(MIX_TOML.format(sources="".join(entries)))
    return path


def loader_for(mixture: sk.Mixture, batch_size: int, workers: int, apply_mix: str = "next_epoch") -> sk.ShardLoader:
    dataset = sk.StreamingDataset(mixture, batch_size=batch_size, seed=0, with_source=True,  # a MixtureDataset
                                  apply_mix=apply_mix)
    return sk.ShardLoader(dataset, num_workers=workers)


def train(loader: sk.ShardLoader, model: torch.nn.Module, counts: np.ndarray,
          stop_after: int | None = None) -> dict | None:
    """Train until the epoch ends (returns None) or ``stop_after`` steps (returns the state)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
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
    parser.add_argument("--apply-mix", choices=["next_epoch", "now"], default="next_epoch",
                        help="when the resumed run's new weights apply (default: from the next epoch)")
    parser.add_argument("--out", help="folder for the generated datasets and mix.toml (default: temporary)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or tmp
        os.makedirs(root, exist_ok=True)
        mixture = sk.load_mixture(args.mixture or make_mixture(root))
        names = [source.label for source in mixture.sources]
        model = torch.nn.Linear(8, 1)
        counts = np.zeros(len(names), dtype=np.int64)
        loader = loader_for(mixture, batch_size=16, workers=0)
        state = train(loader, model, counts, stop_after=20)  # "killed" after 20 steps of epoch 0
        # resumed elsewhere: batch 10, two workers, the weights reversed (from epoch 1 on, or now)
        reweighted = dataclasses.replace(mixture, sources=[
            dataclasses.replace(s, weight=w) for s, w in zip(mixture.sources, [s.weight for s in mixture.sources][::-1],
                                                             strict=True)])
        loader = loader_for(reweighted, batch_size=10, workers=2, apply_mix=args.apply_mix)
        if state is not None:
            loader.load_state_dict(state)
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            if epoch > 0:
                counts = np.zeros(len(names), dtype=np.int64)
            train(loader, model, counts)
            # stream positions each source's passes advance this epoch (its planned count; a rest
            # re-planned under new weights may also skip untaken samples of a down-weighted source)
            planned = np.array(loader.streaming.source.source_for(epoch).advance)  # type: ignore[union-attr]
            consumed = {e["name"]: e["consumed"] for e in loader.state_dict()["mixture"]["sources"]}
            print(f"epoch {epoch}: trained {dict(zip(names, counts.tolist(), strict=True))}, "
                  f"planned {dict(zip(names, planned.tolist(), strict=True))} (drop tail < ranks x batch); "
                  f"state counted {consumed}, stats() this iteration {loader.stats()['sources']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
