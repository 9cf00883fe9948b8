"""Token-block batches as tensors (specs/token-blocks.md TB4); the cutting is in
:mod:`shardkit.plan.tokens.blocks`; ``StreamingDataset(..., tokens=...)`` streams them
(loader/token_batching.py).

``token_batches(work, docs, options, batch_size, state)`` yields ``(batch, state)``: ``batch``
holds int64 ``input_ids``/``labels``/``position_ids`` of shape (B, L), int32 ``cu_seqlens`` and
the ints ``max_seqlen``, ``num_tokens`` (effective, non-padding inputs) and ``num_padding``;
``state`` is the JSON-able consumer state *after* this batch (TB5) — save it once the training
loop has received the batch, and pass it back to continue exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from shardkit.plan.tokens.blocks import Block, BlockCutter, BlockOptions
from shardkit.plan.tokens.pool import ConsumerWork
from shardkit.plan.tokens.rows import TokenDocs, assemble

TENSOR_KEYS = ("input_ids", "labels", "position_ids", "cu_seqlens")


def to_tensors(arrays: dict[str, Any], with_provenance: bool = False,
               tensor: Callable[[np.ndarray], torch.Tensor] = torch.from_numpy) -> dict[str, Any]:
    """Numpy rows from :func:`assemble` → tensors (``tensor``: default no copy);
    ``doc_index``/``token_offset`` kept only when ``with_provenance`` (audits)."""
    keys = TENSOR_KEYS + (("doc_index", "token_offset") if with_provenance else ())
    batch: dict[str, Any] = {key: tensor(arrays[key]) for key in keys}
    batch.update(max_seqlen=int(arrays["max_seqlen"]), num_tokens=int(arrays["num_tokens"]),
                 num_padding=int(arrays["num_padding"]))
    return batch


def batch_blocks(work: ConsumerWork, options: BlockOptions, batch_size: int,
                 state: dict[str, Any] | None = None) -> Iterator[tuple[list[Block], BlockCutter]]:
    """One consumer's batches of blocks from ``state`` on, each with the cutter after it
    (``work.num_blocks`` blocks in all; padding blocks past the work's end)."""
    if state is None:
        cutter, done = BlockCutter(work.pieces, options), 0
    else:
        cutter, done = BlockCutter.from_dict(work.pieces, options, state), int(state["blocks"])
    while done < work.num_blocks:
        blocks = []
        for _ in range(min(batch_size, work.num_blocks - done)):
            block = cutter.next_block()
            blocks.append(block if block is not None else Block((), options.seq_len))
        done += len(blocks)
        yield blocks, cutter


def token_arrays(work: ConsumerWork, docs: TokenDocs, options: BlockOptions, batch_size: int,
                 state: dict[str, Any] | None = None) -> Iterator[tuple[dict[str, Any], BlockCutter]]:
    """One consumer's batches as numpy rows (:func:`assemble`) from ``state`` on, each with the
    cutter after it (``work.num_blocks`` blocks in all; padding blocks past the work's end)."""
    for blocks, cutter in batch_blocks(work, options, batch_size, state):
        yield assemble(blocks, docs, options.seq_len, options.mode), cutter


def token_batches(work: ConsumerWork, docs: TokenDocs, options: BlockOptions, batch_size: int,
                  state: dict[str, Any] | None = None, with_provenance: bool = False,
                  ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """One consumer's batches from ``state`` on, with the consumer state after each (TB5)."""
    done = 0 if state is None else int(state["blocks"])
    for arrays, cutter in token_arrays(work, docs, options, batch_size, state):
        done += len(arrays["input_ids"])
        yield to_tensors(arrays, with_provenance), {**cutter.to_dict(), "blocks": done}
