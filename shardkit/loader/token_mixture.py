"""``TokenMixtureDataset``: token blocks over a mixture (specs/token-blocks.md TB15-TB17,
specs/mixture.md MX14).

``sk.StreamingDataset(mixture_or_file, batch_size=B, tokens=sk.TokenBlocks(L, ...))`` makes
one. The composition is the two layers unchanged, one over the other: the mixture decides the
epoch's *documents* — its multiset (MX1-MX2, weights in samples or in tokens, MX13) in its
mixed order (MX3-MX5), planned for one consumer — and that sequence is the token layer's epoch
order (TB11), so the cutter, the equal-step split, the remainder pool and the loader state of
token blocks (TB5-TB8, TB13) apply as they are. Document ``d`` is the ``d``-th element of the
epoch multiset; a sample a source repeats within an epoch is two documents.

The loader state holds both parts: ``plan`` (the token plan state, fingerprinted with the
mixture's epoch digest), ``tokens`` (the cut levels and cutter states — each consumer's partial
document), and ``mixture`` (the epoch's description, MX10, with per source ``consumed``:
documents whose first position the loop received, and ``consumed_tokens``: positions received).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardkit.errors import StateError
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.mixture_dataset import MixtureDataset
from shardkit.loader.mixture_state import SOURCES_KEY, mixture_of
from shardkit.loader.token_dataset import TOKENS_KEY, TokenDataset
from shardkit.plan import PlanParams
from shardkit.plan.mixture_state_check import MIX_STATE_VERSION
from shardkit.plan.token_config import TokenBlocks
from shardkit.plan.token_plan import TokenPlan, build_token_plan, epoch_order
from shardkit.read.mixture import Mixture, load_mixture, source_lengths
from shardkit.read.mixture_stream import source_of_indices
from shardkit.read.options import ReadOptions
from shardkit.read.token_docs import EpochDocuments
from shardkit.read.token_mixture_docs import MixtureDocuments


class TokenMixtureDataset(MixtureDataset, TokenDataset):
    """Batches of ``batch_size`` token blocks cut from a mixture's epoch documents. Keyword
    arguments as :class:`MixtureDataset` plus ``tokens``; ``with_source=True`` adds int64
    (B, L) ``_source`` (the source of each slot's document, -1 at padding); ``with_index=True``
    adds ``_index`` (the sample's index in this mixture: source base + its index in the
    source) and ``_token_offset`` (TB14)."""

    def __init__(self, mixture: Mixture | str, *, batch_size: int, tokens: TokenBlocks,
                 apply_mix: str = "next_epoch", **kwargs: Any) -> None:
        if apply_mix != "next_epoch":
            raise ValueError("apply_mix='now' is not supported with tokens=: a new mix for the rest of a started "
                             "epoch would change its document order; new weights take effect at the next epoch")
        mixture = load_mixture(mixture) if isinstance(mixture, str) else mixture
        weighted = [s.label for s in mixture.sources if s.sample_weights is not None]
        if weighted:
            raise ValueError(f"tokens= over a mixture whose sources {weighted} have sample_weights is not supported "
                             f"(specs/mixture.md MX17): a document repeated in an epoch has no place in the token "
                             f"plan's cuts")
        super().__init__(mixture, batch_size=batch_size, tokens=tokens, apply_mix=apply_mix, **kwargs)
        if self.mixture.weight_unit == "tokens" and self.mixture.token_field != tokens.field:
            raise ValueError(f"mixture token_field {self.mixture.token_field!r} is not the blocks' field "
                             f"{tokens.field!r}: weights in tokens must count the tokens the blocks cut")
        if self._lengths is None:  # weights in samples: read each source's lengths here (TB6)
            self._lengths = tuple(source_lengths(source, dataset, tokens.field)
                                  for source, dataset in zip(self.mixture.sources, self.opened.datasets, strict=True))
        self._source_lengths: tuple[np.ndarray, ...] = self._lengths  # per source (also tallies tokens, MX10)

    # ---- plan: the mixed sequence of one consumer is the epoch order (TB15) -------------------
    def lengths(self) -> np.ndarray:
        """Tokens per sample, in this mixture's global sample order (sources one after another)."""
        return self._plan_lengths(tuple(range(len(self.spec.sources))))

    def _plan_lengths(self, order: tuple[int, ...]) -> np.ndarray:
        parts = [np.asarray(self._source_lengths[i], dtype=np.int64) for i in order]
        return np.concatenate(parts + [np.zeros(0, dtype=np.int64)])

    def _build_token_plan(self, params: PlanParams, tokens: TokenBlocks, resume: dict[str, Any] | None,
                          cuts: list[dict[str, Any]], num_blocks: int | None = None) -> TokenPlan:
        source = self.source_for(params.epoch)
        lengths = self._plan_lengths(self._order_for(params.epoch))
        return build_token_plan(source.shard_sizes, lengths, params, tokens, resume, cuts, order_of=source.plan,
                                num_blocks=num_blocks)

    def plan(self, epoch: int, world_size: int, num_workers: int, resume: dict[str, Any] | None = None) -> Any:
        return TokenDataset.plan(self, epoch, world_size, num_workers, resume)

    # ---- the loader state: mixture part + token part ------------------------------------------
    def state_part(self, epoch: int, resume: dict[str, Any] | None, received: np.ndarray) -> dict[str, Any]:
        part = super().state_part(epoch, resume, received)["mixture"]
        return {"mixture": {**part, "version": MIX_STATE_VERSION}}  # consumed_tokens per source (MX14)

    def load_state_part(self, state: dict[str, Any]) -> str:
        if TOKENS_KEY not in state or mixture_of(state) is None:
            raise StateError("loader state: not saved by a token mixture (it needs both a 'mixture' and a "
                             "'tokens' part); resume it with the dataset that saved it")
        digest = MixtureDataset.load_state_part(self, state)  # the started epoch's mixture (MX10)
        TokenDataset.load_state_part(self, state)  # its cut levels, checked by replay (TB13)
        return digest

    def _apply(self, started: dict[str, Any]) -> None:
        super()._apply(started)
        self._token_plans = {}

    # ---- reading and provenance ------------------------------------------------------------------
    def _document_reader(self, plan: TokenPlan, needs: list[tuple[int, int]], stats: WorkerStats) -> EpochDocuments:
        return MixtureDocuments(self.opened, self._order_for(plan.params.epoch), plan.order,
                                (self.tokens.field, self.tokens.loss_mask_field), needs, self._shard_cache(),
                                stats.read, ReadOptions(read_ahead=False))

    def _slot_arrays(self, plan: TokenPlan) -> dict[str, np.ndarray]:
        """Per document index: its source (this mixture's numbering) and, with_index, its sample."""
        order = self._order_for(plan.params.epoch)
        bases = self._sample_bases_of(order)
        found = epoch_order(plan.order)
        in_plan = source_of_indices(bases, found)
        sources = np.asarray(order, dtype=np.int64)[in_plan]
        slots = {"_source": sources}
        if self.options.with_index:
            slots["_index"] = found - bases[in_plan] + self._sample_bases[sources]
        return slots

    def _to_batch(self, arrays: dict[str, Any], slots: dict[str, np.ndarray]) -> dict[str, Any]:
        shown = slots if self.with_source else {k: v for k, v in slots.items() if k != "_source"}
        batch = TokenDataset._to_batch(self, arrays, shown)
        batch[SOURCES_KEY] = tuple(self._block_tally(arrays, slots["_source"]).tolist())  # as a sample mixture's
        return batch

    def _block_tally(self, arrays: dict[str, Any], sources: np.ndarray) -> np.ndarray:
        """Per source: documents started in this batch (position 0 received), then positions."""
        doc, offset = arrays["doc_index"].reshape(-1), arrays["token_offset"].reshape(-1)
        real = doc >= 0
        of_slot = sources[doc[real]]
        n = len(self.spec.sources)
        started = np.bincount(of_slot[offset[real] == 0], minlength=n)
        return np.concatenate([started, np.bincount(of_slot, minlength=n)]).astype(np.int64)

