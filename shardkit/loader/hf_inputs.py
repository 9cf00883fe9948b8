"""What of a batch reaches a Hugging Face model's ``forward`` under ``ShardkitTrainer`` (TB20).

Two rules, applied to every batch the loader yields, before ``Trainer`` counts the items of
the loss (``num_items_in_batch``) or moves the batch to the device:

1. **Labels in the model's convention.** A ``*ForCausalLM`` shifts ``labels`` itself. A
   token-block dataset with ``TokenBlocks(labels="shifted")`` yields the target of input ``j``
   at column ``j``; those labels are moved to the Hugging Face layout (:func:`to_hf_labels`),
   so the model trains the true next token, never the one after it. ``labels="hf"`` batches
   are already in it. Labels of any other dataset are the ``collate_fn``'s and are left alone.
2. **Only keys the model names.** ``ModelInputs`` keeps the keys that are named parameters of
   the model's ``forward`` (``input_ids``, ``labels``, ``position_ids``, ``attention_mask`` …)
   and drops the rest — ``cu_seqlens``, ``max_seqlen``, ``num_tokens``, ``num_padding``,
   ``_index`` … — which a ``forward(**kwargs)`` would otherwise swallow silently. The keys it
   drops are logged once. ``ShardkitTrainer(model_inputs=fn)`` replaces this rule: ``fn``
   gets the batch (labels already in the Hugging Face layout) and returns the ``forward``
   keyword arguments.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import torch

from shardkit.plan.tokens.config import TokenBlocks
from shardkit.plan.tokens.rows import IGNORE_INDEX, to_hf_labels

log = logging.getLogger(__name__)
Batch = dict[str, Any]
InputsHook = Callable[[Batch], Batch]


def forward_keys(model: Any) -> frozenset[str]:
    """The named keyword parameters of ``model.forward`` (``**kwargs`` and ``*args`` not included)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = inspect.signature(model.forward).parameters.values()
    return frozenset(p.name for p in params if p.kind in kinds)


class ModelInputs:
    """The default ``model_inputs`` hook: the batch's keys that ``forward`` names (rule 2)."""

    def __init__(self, keys: frozenset[str]) -> None:
        self.keys = keys
        self._told: frozenset[str] = frozenset()

    def __call__(self, batch: Batch) -> Batch:
        if batch and not self.keys & frozenset(batch):
            raise ValueError(f"the model's forward names none of the batch keys ({', '.join(sorted(batch))}); "
                             "pass ShardkitTrainer(model_inputs=fn) to say which reach it")
        dropped = frozenset(batch) - self.keys
        if dropped - self._told:
            self._told |= dropped
            log.info("shardkit: keys not named by the model's forward are not passed to it: %s",
                     ", ".join(sorted(dropped)))
        return {key: value for key, value in batch.items() if key in self.keys}


def token_blocks_of(dataset: Any) -> TokenBlocks | None:
    """The ``TokenBlocks`` a (token-block or token-mixture) dataset cuts with, or None."""
    tokens = getattr(dataset, "tokens", None)
    return tokens if isinstance(tokens, TokenBlocks) else None


def check_for_hf(tokens: TokenBlocks | None) -> None:
    """Refuse what a Hugging Face loss cannot honour: it ignores only -100."""
    if tokens is not None and tokens.ignore_index != IGNORE_INDEX:
        raise ValueError(f"ShardkitTrainer: TokenBlocks.ignore_index={tokens.ignore_index}, but a Hugging Face "
                         f"model's loss ignores only {IGNORE_INDEX}: it would train on those labels")


def in_hf_layout(batch: Batch, tokens: TokenBlocks | None) -> Batch:
    """``batch`` with shifted token-block labels moved to the Hugging Face layout (rule 1); a
    new ``labels`` tensor, the batch's own left untouched."""
    if tokens is None or tokens.labels == "hf" or not isinstance(batch.get("labels"), torch.Tensor):
        return batch
    labels = batch["labels"].clone()
    to_hf_labels(labels.numpy(), tokens.ignore_index)
    return {**batch, "labels": labels}
