"""Token datasets with known contents, a slow reference for token-block rows, and a runner
that consumes a chain of kills and elastic resumes (specs/token-blocks.md).

Sample ``s`` of ``write_token_dataset`` holds ``tokens = 10 + 1000·s + arange(n_s)`` (never a
boundary or pad id) and, with masks, ``loss_mask[i] = (s + i) % 3 != 0``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

import shardkit as sk
from shardkit.plan.tokens.plan import epoch_order

Pair = tuple[int, int]  # (global sample index, position in its segment)


def token_doc(sample: int, length: int, dtype: Any = np.int32) -> np.ndarray:
    return (10 + 1000 * sample + np.arange(length)).astype(dtype)


def loss_mask(sample: int, length: int) -> np.ndarray:
    return ((sample + np.arange(length)) % 3 != 0).astype(np.uint8)


def write_token_dataset(root: str, lengths: Sequence[int], dtype: Any = np.int32, masks: bool = False,
                        shard_size: int = 1500, first: int = 0) -> str:
    """Sample ``s`` holds document ``first + s`` (``first``: where a mixture source starts in the
    mixture's global numbering, so the references apply to ``_index``)."""
    with sk.ShardWriter(root, shard_size=shard_size, block_size=256) as writer:
        for s, n in enumerate(lengths):
            sample: dict[str, Any] = {"tokens": token_doc(first + s, n, dtype)}
            if masks:
                sample["loss_mask"] = loss_mask(first + s, n)
            writer.write(sample)
    return root


def write_token_mixture(root: str, sources: Sequence[tuple[Sequence[int], float]], shard_size: int = 1500,
                        **mixture: Any) -> tuple[sk.Mixture, list[int]]:
    """Sources ``s0, s1, …`` (their document lengths and weight) numbered one after another like
    the mixture's ``_index``; returns the mixture and the lengths in that global numbering."""
    lengths: list[int] = []
    found = []
    for i, (sizes, weight) in enumerate(sources):
        path = write_token_dataset(f"{root}/s{i}", sizes, shard_size=shard_size, first=len(lengths))
        found.append(sk.Source(path, weight=weight, name=f"s{i}"))
        lengths += list(sizes)
    return sk.Mixture(found, **mixture), lengths



def write_token_mixture_file(root: str, sources: Sequence[tuple[Sequence[int], float]],
                             samples_per_epoch: int) -> str:
    """``write_token_mixture``'s sources plus ``root/mix.toml`` naming them, weights in tokens:
    the mixture file a training script is given."""
    write_token_mixture(root, sources)
    body = f'samples_per_epoch = {samples_per_epoch}\nweight_unit = "tokens"\n' + "".join(
        f'[[sources]]\npath = "s{i}"\nweight = {w}\n' for i, (_, w) in enumerate(sources))
    path = os.path.join(root, "mix.toml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(body)
    return path

def order_pairs(order: Sequence[int], lengths: Sequence[int], tokens: sk.TokenBlocks) -> Counter[Pair]:
    """The epoch's (sample, position) pairs when the epoch lists ``order`` (a mixture's epoch may
    list a sample more than once: each occurrence is a document of its own)."""
    return Counter((s, o) for s in order for o in range(num_positions(lengths[s], tokens)))


def segment(sample: int, length: int, tokens: sk.TokenBlocks) -> list[int]:
    if length == 0:
        return []
    body = token_doc(sample, length).tolist()
    return ([tokens.bos_id] if tokens.bos_id is not None else []) + body + \
        ([tokens.eos_id] if tokens.eos_id is not None else [])


def segment_mask(sample: int, length: int, tokens: sk.TokenBlocks) -> list[bool]:
    if length == 0:
        return []
    body = loss_mask(sample, length).astype(bool).tolist() if tokens.loss_mask_field else [True] * length
    return ([True] if tokens.bos_id is not None else []) + body + ([True] if tokens.eos_id is not None else [])


def num_positions(length: int, tokens: sk.TokenBlocks) -> int:
    n = len(segment(0, length, tokens))
    return n if tokens.mode == "concat" else max(n - 1, 0)


def epoch_pairs(lengths: Sequence[int], tokens: sk.TokenBlocks) -> Counter[Pair]:
    return Counter((s, o) for s, n in enumerate(lengths) for o in range(num_positions(n, tokens)))


def reference_label(s: int, o: int, lengths: Sequence[int], order: list[int], tokens: sk.TokenBlocks) -> int:
    """The label of input position ``o`` of sample ``s``, by the letter of TB4."""
    seg, mask = segment(s, lengths[s], tokens), segment_mask(s, lengths[s], tokens)
    if o + 1 < len(seg):
        return seg[o + 1] if mask[o + 1] else tokens.ignore_index
    if tokens.mode == "pack" or tokens.mask_doc_starts:
        return tokens.ignore_index
    after = order[order.index(s) + 1:]
    nxt = next((t for t in after if lengths[t] > 0), None)
    if nxt is None:
        return tokens.ignore_index
    first, first_mask = segment(nxt, lengths[nxt], tokens)[0], segment_mask(nxt, lengths[nxt], tokens)[0]
    return first if first_mask else tokens.ignore_index


def reference_targets(batch: dict[str, Any], lengths: Sequence[int], order: list[int],
                      tokens: sk.TokenBlocks, layout: str | None = None) -> np.ndarray:
    """The labels ``batch`` (``with_index=True``) must hold, slot by slot from its provenance by
    the letter of TB4 — the target of each input, ``ignore_index`` at padding — in the layout
    ``layout`` (default: ``tokens.labels``; TB20: ``"hf"`` moves each target one column right
    and ignores column 0)."""
    index, offset = batch["_index"].numpy(), batch["_token_offset"].numpy()
    want = np.full(index.shape, tokens.ignore_index, dtype=np.int64)
    for (r, j), s in np.ndenumerate(index):
        if s >= 0:
            want[r, j] = reference_label(int(s), int(offset[r, j]), lengths, order, tokens)
    if (layout or tokens.labels) == "hf":
        want = np.concatenate([np.full((len(want), 1), tokens.ignore_index), want[:, :-1]], axis=1)
    return want


def check_against_reference(batch: dict[str, Any], lengths: Sequence[int], order: list[int],
                            tokens: sk.TokenBlocks) -> None:
    """input_ids, labels, position_ids, cu_seqlens, max_seqlen and counts of ``batch`` (made
    with ``with_index=True``) recomputed slot by slot from its provenance (TB4)."""
    index, offset = batch["_index"].numpy(), batch["_token_offset"].numpy()
    rows, width = index.shape
    seqlens: list[int] = []
    targets = reference_targets(batch, lengths, order, tokens)
    assert batch["labels"].tolist() == targets.tolist()
    for r in range(rows):
        run = 0
        for j in range(width):
            s, o = int(index[r, j]), int(offset[r, j])
            if s < 0:
                assert int(batch["input_ids"][r, j]) == tokens.pad_id
                assert int(batch["position_ids"][r, j]) == 0
                continue
            assert int(batch["input_ids"][r, j]) == segment(s, lengths[s], tokens)[o]
            continues = j > 0 and int(index[r, j - 1]) == s and int(offset[r, j - 1]) == o - 1
            if not continues and run:
                seqlens.append(run)
                run = 0
            assert int(batch["position_ids"][r, j]) == run
            run += 1
        seqlens.append(run)
        pad = int((index[r] < 0).sum())
        if pad:
            seqlens.append(pad)
    seqlens = [n for n in seqlens if n]
    assert batch["cu_seqlens"].tolist() == np.concatenate([[0], np.cumsum(seqlens)]).tolist()
    assert batch["max_seqlen"] == max(seqlens)
    assert batch["num_padding"] == int((index < 0).sum())
    assert batch["num_tokens"] == int((index >= 0).sum())


def order_of(ds: Any) -> list[int]:
    """Global sample indices in the epoch order of ``ds``'s current epoch (TB11)."""
    plan = ds.step_plan(ds.epoch, 1, 0)
    return [int(i) for i in epoch_order(plan.order)]


def consumed_pairs(batch: dict[str, Any]) -> list[Pair]:
    index, offset = batch["_index"].reshape(-1).tolist(), batch["_token_offset"].reshape(-1).tolist()
    return [(s, o) for s, o in zip(index, offset, strict=True) if s >= 0]


def run_level(path: str | sk.Mixture, tokens: sk.TokenBlocks, batch_size: int, world: int, tail: str,
              state: dict[str, Any] | None, kills: Sequence[int] | None,
              steps: list[int] | None = None, **dataset: Any) -> tuple[list[Pair], dict[str, Any], Any]:
    """Consume one level on ``world`` ranks (in this process, no workers): rank ``r`` stops after
    ``kills[r]`` batches (all with ``kills=None``). Returns the pairs consumed, the global
    state at the boundary (as ``state_dict`` builds it after its gather, a mixture's per-source
    counts summed over ranks), and the last plan; ``steps`` gets each rank's batches; ``dataset``:
    more keywords of the ``StreamingDataset`` (``sample_weights=``)."""
    pairs: list[Pair] = []
    offsets: dict[int, int] = {}
    received: Counter[int] = Counter()
    ds = None
    for rank in range(world):
        ds = sk.StreamingDataset(path, batch_size=batch_size, tokens=tokens, tail=tail, with_index=True, seed=3,
                                 **dataset)
        ds.options = replace(ds.options, rank=rank, world_size=world)
        loader = sk.ShardLoader(ds)
        if state is not None:
            loader.load_state_dict(state)
        batches, stop = iter(loader), None if kills is None else kills[rank % len(kills)]
        while stop is None or stop > 0:  # a batch the loop received counts as consumed (L1)
            batch = next(batches, None)
            if batch is None or loader.epoch != 0:
                break  # (a state with nothing left moves on to epoch 1: not this test's)
            pairs += consumed_pairs(batch)
            stop = None if stop is None else stop - 1
            if steps is not None:
                steps[rank] += 1
        if loader.epoch == 0:  # this rank's own consumer (W=0: consumer = rank)
            offsets[rank] = loader.consumed_snapshot()[0][rank]
            sources = loader.stats().get("sources", {})  # a mixture: samples then tokens per source
            received.update(dict(enumerate([v["samples"] for v in sources.values()] +
                                           [v["tokens"] for v in sources.values()])))
    assert ds is not None
    epoch, resume = 0, state["plan"] if state else None
    plan = ds.step_plan(epoch, world, 0, resume)
    merged = [offsets.get(c, start) for c, start in enumerate(plan.start_offsets)]
    width = 2 * len(ds.source.spec.sources) if isinstance(path, sk.Mixture) else 0
    counts = np.array([received[i] for i in range(width)], dtype=np.int64)
    new_state = {"version": 1, "kind": "shardkit.loader", "epoch": epoch, "steps": 0,
                 "plan": ds.plan_state(plan, merged, epoch), **ds.state_part(epoch, resume, counts),
                 **ds.extra_state(plan, merged)}
    return pairs, new_state, plan


def dropped_pairs(plan: Any) -> Counter[Pair]:
    """Positions every level of ``plan``'s chain dropped by its tail (TB6), as pairs."""
    order = epoch_order(plan.order)
    return Counter((int(order[p.doc_index]), o) for p in plan.dropped for o in range(p.start, p.stop))
