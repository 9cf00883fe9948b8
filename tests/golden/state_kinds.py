"""The loaders the golden states of each kind are saved from (tools/make_golden_states.py) and
loaded into (tests/golden/test_golden_states.py): a plain dataset, sample weights, a mixture,
token blocks in both modes, and token blocks over a mixture, over the golden datasets ``v1/``.
Written against the public API only, so that an older shardkit runs it too."""

from __future__ import annotations

import os
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
BASIC = os.path.join(HERE, "v1", "basic")
COLUMNS = os.path.join(HERE, "v1", "columns")
OUT = os.path.join(HERE, "v1", "states")

KINDS: dict[str, dict[str, Any]] = {
    "plain": {"path": COLUMNS, "batch": 4, "steps": 3},
    "weights": {"path": COLUMNS, "batch": 4, "steps": 2, "sample_weights": [1.0, 2.0, 0.0] * 16,
                "samples_per_epoch": 40},
    "mixture": {"mixture": [(BASIC, 0.25, None), (COLUMNS, 0.75, None)], "samples_per_epoch": 32, "batch": 4,
                "steps": 3},
    "tokens-concat": {"path": COLUMNS, "batch": 2, "steps": 3, "tokens": ("concat", 8)},
    "tokens-pack": {"path": COLUMNS, "batch": 2, "steps": 3, "tokens": ("pack", 8)},
    "tokens-mixture": {"mixture": [(COLUMNS, 0.25, "a"), (COLUMNS, 0.75, "b")], "samples_per_epoch": 32, "batch": 2,
                       "steps": 2, "tokens": ("concat", 8)},
}


def _count_only(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The collation for sample kinds: ids only (the golden samples hold fields of every type)."""
    return {"n": len(samples)}


def make_loader(sk: Any, kind: str) -> Any:
    """A ``ShardLoader`` (``num_workers=0``) of ``kind``, as both trees build it."""
    spec = KINDS[kind]
    options: dict[str, Any] = {"batch_size": spec["batch"], "seed": 3, "shuffle_window": 16, "with_index": True}
    if "tokens" in spec:
        mode, seq_len = spec["tokens"]
        options["tokens"] = sk.TokenBlocks(seq_len, field="tokens", mode=mode, eos_id=1)
    else:
        options["collate_fn"] = _count_only
    if "sample_weights" in spec:
        options.update(sample_weights=spec["sample_weights"], samples_per_epoch=spec["samples_per_epoch"])
    if "mixture" in spec:
        source = sk.Mixture([sk.Source(path, weight, name) for path, weight, name in spec["mixture"]],
                            samples_per_epoch=spec["samples_per_epoch"])
    else:
        source = spec["path"]
    return sk.ShardLoader(sk.StreamingDataset(source, **options), num_workers=0)


def continuation(loader: Any, kind: str) -> list[list[Any]]:
    """What ``loader`` trains to the end of its epoch: per batch the sample ids (``_index``), or
    for token blocks the input ids of each row."""
    out: list[list[Any]] = []
    for batch in loader:
        if "tokens" in KINDS[kind]:
            out.append(batch["input_ids"].tolist())
        else:
            out.append([int(i) for i in batch["_index"].tolist()])
    return out
