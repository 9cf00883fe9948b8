"""``TokenDataset``: a :class:`StreamingDataset` of fixed-length token blocks (specs/token-blocks.md).

``sk.StreamingDataset(path, batch_size=B, tokens=sk.TokenBlocks(L, ...))`` makes one: every
batch holds ``B`` blocks of ``L`` positions (TB4). Its plan is a :class:`TokenPlan` (positions
from per-document lengths, plan/token_plan.py); each consumer cuts its work into blocks
(plan/token_blocks.py), reads the documents it needs (read/token_docs.py) and fills the rows
(plan/token_rows.py). Through ``ShardLoader`` the consumed boundary is the usual one, counted
in blocks; the loader state's ``plan`` is the usual plan state and ``tokens`` its token part
(TB5, TB7, TB13), which reaches workers through the control block like a mixture's (L6).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from shardkit.errors import PlanError, StateError
from shardkit.loader.dataset import StreamingDataset
from shardkit.loader.emitter import Emitter
from shardkit.loader.epoch_check import log_once
from shardkit.loader.guard import check_caller
from shardkit.loader.loader_stats import WorkerStats
from shardkit.loader.token_batch import batch_blocks, to_tensors
from shardkit.loader.topology import Topology
from shardkit.loader.transfer.arena import alloc, alloc_array
from shardkit.loader.transfer.packed import in_groups
from shardkit.loader.transfer.ring import Ring
from shardkit.plan import PlanParams
from shardkit.plan.token_blocks import Block, BlockOptions
from shardkit.plan.token_config import IDENTITY_KEYS, TokenBlocks
from shardkit.plan.token_consumer import consumer_view
from shardkit.plan.token_plan import TokenPlan, build_token_plan, epoch_order, token_yield_problem
from shardkit.plan.token_rows import TokenDocs, assemble
from shardkit.plan.token_state_check import check_token_part, plan_depth
from shardkit.read.options import ReadOptions
from shardkit.read.token_docs import EpochDocuments
from shardkit.read.token_lengths import document_lengths

TOKENS_KEY = "tokens"  # the loader state's token part
TRANSFER_BATCHES = 8  # batches per DataLoader item by default (X8): a block batch takes ~0.1 ms to make,
# so DataLoader's per-item cost (queues, feeder thread, unpickling) weighed on it at 4 (benchmarks T6)
PREFETCH_BATCHES, PREFETCH_TOTAL = 96, 1024  # batches in flight per worker / over all workers (TB19)
PREFETCH_BYTES = 64 << 20  # per worker: the (B, L) int64 rows of the batches in flight


class TokenDataset(StreamingDataset):
    """Batches of ``batch_size`` token blocks (specs/token-blocks.md); keyword arguments as
    :class:`StreamingDataset` (``transform``/``collate_fn`` do not apply), plus ``tokens``.
    ``with_index=True`` adds, per slot, ``_index`` (the global sample index of the document,
    -1 at padding) and ``_token_offset`` (the position in its segment), for audits (TB14)."""

    def __init__(self, path: str, *, batch_size: int, tokens: TokenBlocks, **kwargs: Any) -> None:
        if not isinstance(tokens, TokenBlocks):
            raise TypeError(f"tokens: expected a shardkit.TokenBlocks, got {type(tokens).__name__}")
        for name in ("transform", "collate_fn"):
            if kwargs.get(name):
                raise TypeError(f"StreamingDataset(tokens=...): {name} does not apply to token blocks")
        super().__init__(path, batch_size=batch_size, tokens=tokens, **kwargs)
        self.tokens = tokens
        self._sample_lengths: np.ndarray | None = None  # tokens per sample, manifest order (TB6)
        self._cuts: list[dict[str, Any]] = []  # the loaded state's token levels (with consumer states)
        self._cuts_epoch: int | None = None  # ... which belong to this epoch's chains only
        self._token_plans: dict[str, TokenPlan] = {}
        self._pack_blocks: dict[str, int] = {}  # pack plans' blocks per consumer, counted by the loader

    @property
    def yields_tokens(self) -> bool:
        return True

    def transfer_batches(self) -> int | None:
        return TRANSFER_BATCHES

    def prefetch_batches(self, num_workers: int) -> int | None:
        """TB19: a worker makes a batch in well under a millisecond, so with DataLoader's in-order
        delivery a shallow queue leaves it idle whenever the trainer waits on the other worker's
        group; 12 groups in flight per worker (capped by the rows' bytes and the ring's slots)."""
        row_bytes = 3 * 8 * self.tokens.seq_len  # input_ids, labels, position_ids: int64
        cap = PREFETCH_BYTES // max(self.params.batch_size * row_bytes, 1)
        return max(1, min(PREFETCH_BATCHES, PREFETCH_TOTAL // max(num_workers, 1), cap))

    # ---- plan -----------------------------------------------------------------------------------
    def lengths(self) -> np.ndarray:
        """Tokens per sample of the token field, manifest order (read once, then kept)."""
        if self._sample_lengths is None:
            self._sample_lengths = np.asarray(document_lengths(self.dataset, self.tokens.field), dtype=np.int64)
        return self._sample_lengths

    def step_plan(self, epoch: int, world_size: int, num_workers: int,
                  resume: dict[str, Any] | None = None) -> TokenPlan:
        params = replace(self.params, epoch=epoch, world_size=world_size, num_workers=num_workers)
        cuts = self._loaded_cuts(epoch) if resume is not None else []
        key = repr((params, resume, cuts))
        plan = self._token_plans.get(key)
        if plan is None:  # pack: a worker takes its loader's count of this same plan (TB27)
            plan = self._build_token_plan(params, self.tokens, resume, cuts, self._pack_blocks.get(key))
            if resume is None and not plan.level.split.num_blocks:
                self._check_yield(plan)
            self._token_plans = {key: plan}
        return plan

    def _check_yield(self, plan: TokenPlan) -> None:
        """A fresh epoch with no batch (TB24, like P16): a ``PlanError`` when one consumer would
        get none either (no batch on any topology), else logged once (check_plan)."""
        problem = token_yield_problem(plan, self.path)
        if problem is None:
            return
        alone = replace(plan.params, world_size=1, num_workers=0)
        if plan.num_consumers == 1 or not self._build_token_plan(alone, self.tokens, None, []).level.split.num_blocks:
            raise PlanError(problem)
        log_once(problem)

    def _build_token_plan(self, params: PlanParams, tokens: TokenBlocks, resume: dict[str, Any] | None,
                          cuts: list[dict[str, Any]], num_blocks: int | None = None) -> TokenPlan:
        """The token plan over this dataset's documents (a token mixture plans its mixed order)."""
        return build_token_plan(self.dataset.manifest.shard_sizes, self.lengths(), params, tokens, resume, cuts,
                                num_blocks=num_blocks)

    def _loaded_cuts(self, epoch: int) -> list[dict[str, Any]]:
        """The loaded state's token levels when ``epoch`` is its epoch (later epochs start fresh)."""
        return self._cuts if epoch == self._cuts_epoch else []

    def plan(self, epoch: int, world_size: int, num_workers: int, resume: dict[str, Any] | None = None) -> Any:
        raise TypeError("a token-block dataset has no sample plan; use step_plan")

    # ---- the loader state's token part ------------------------------------------------------------
    def plan_state(self, plan: Any, offsets: list[int], epoch: int) -> dict[str, Any]:
        return dict(plan.to_state(offsets, self.state_fingerprint(epoch)))

    def extra_state(self, plan: Any, offsets: list[int]) -> dict[str, Any]:
        return {TOKENS_KEY: plan.tokens_part(self.tokens, offsets, self._loaded_cuts(plan.params.epoch))}

    def load_state_part(self, state: dict[str, Any]) -> str:
        part = check_token_part(state.get(TOKENS_KEY), plan_depth(state["plan"]))  # its shape first (TB22)
        for key in IDENTITY_KEYS:  # what a position is (TB8)
            if part.get(key) != getattr(self.tokens, key):
                raise StateError(f"loader state: token {key} is {part.get(key)!r}, this dataset's is "
                                 f"{getattr(self.tokens, key)!r}; a resume cannot change what a position is (TB8)")
        self._cuts, self._cuts_epoch, self._token_plans = list(part["levels"]), int(state["epoch"]), {}
        self._check_loaded(state["plan"])
        return self.fingerprint

    def _check_loaded(self, plan_state: dict[str, Any]) -> None:
        """The saved consumer states must be the replay of their offsets (TB5): rebuild the
        saved level exactly as it was (its own params and cut)."""
        saved = PlanParams.from_dict(plan_state["params"])
        cut = self._cuts[-1]
        tokens = replace(self.tokens, **{k: cut[k] for k in ("seq_len", "long_docs", "open_blocks")})
        self._build_token_plan(saved, tokens, plan_state, self._cuts).check_saved()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_token_plans"] = {}
        return state

    # ---- workers: the loaded token levels travel in the control block (L6) ------------------------
    def publish(self, topology: Topology, resume: dict[str, Any] | None, generation: int,
                ring: Ring | None = None, group: int = 1) -> None:
        super().publish(topology, resume, generation, ring, group)
        payload = self.control.read() or {}
        counted = {key: plan.level.split.num_blocks for key, plan in self._token_plans.items()
                   if plan.level.options.mode == "pack"}  # workers need not count them again (TB27)
        self.control.write({**payload, TOKENS_KEY: {"epoch": self._cuts_epoch, "levels": self._cuts,
                                                    "pack_blocks": counted}})

    def __iter__(self) -> Iterator[Any]:
        check_caller(f"StreamingDataset({self.path!r}, tokens=...)")  # only ShardLoader (R11)
        self.dataset = self.dataset.in_this_process()
        payload = self.control.read() or {}
        loaded = payload.get(TOKENS_KEY)
        self._pack_blocks = dict(loaded.get("pack_blocks", {})) if loaded is not None else {}
        if loaded is not None and (loaded["epoch"], loaded["levels"]) != (self._cuts_epoch, self._cuts):
            self._cuts, self._cuts_epoch, self._token_plans = loaded["levels"], loaded["epoch"], {}  # persistent worker
        topology = self._topology(payload)
        epoch = payload.get("epoch", self._epoch)
        plan = self.step_plan(epoch, topology.world_size, topology.num_workers, payload.get("resume"))
        emitter, group = self._emitter(plan, topology, payload, epoch)
        batches = self._token_batches(plan, emitter.consumer, emitter, emitter.stats)
        return batches if group == 1 else in_groups(batches, group, emitter.position // self.params.batch_size)

    def _token_batches(self, plan: TokenPlan, consumer: int, emitter: Emitter, stats: WorkerStats) -> Iterator[Any]:
        work = plan.level.split.consumers[consumer]
        view = consumer_view(plan, consumer, self.tokens.extra_tokens)  # its own documents only (TB25)
        docs = self._document_reader(plan, view.needs, stats)
        docs.expect(view.num_tokens, view.positions)  # TB23
        rows = TokenDocs.from_lengths(docs, view.segments, self.tokens.token_options(),
                                      docs.masks if self.tokens.loss_mask_field is not None else None, view.next_doc)
        slots = self._slot_arrays(plan)
        options = plan.level.options
        for blocks, cutter in batch_blocks(work, options, self.params.batch_size, plan.start_state(consumer)):
            yield emitter.emit_made(functools.partial(self._in_arena, blocks, rows, options, slots), len(blocks))
            docs.release(cutter.piece_index, {p.doc_index for b in cutter.bins for p in b})

    def _document_reader(self, plan: TokenPlan, needs: list[tuple[int, int]], stats: WorkerStats) -> EpochDocuments:
        options = ReadOptions(read_ahead=False, views=True)  # column blocks as column views (TB12)
        return EpochDocuments(self.dataset, plan.order, (self.tokens.field, self.tokens.loss_mask_field),
                              needs, self._shard_cache(), stats.read, options)

    # ---- rows and provenance per slot (TB14) -------------------------------------------------------
    def _slot_arrays(self, plan: TokenPlan) -> dict[str, np.ndarray]:
        """Per-slot keys a batch adds, each given per document index (-1 at padding)."""
        return {"_index": epoch_order(plan.order)} if self.options.with_index else {}

    def _in_arena(self, blocks: list[Block], rows: TokenDocs, options: BlockOptions,
                  slots: dict[str, np.ndarray]) -> dict[str, Any]:
        """The batch of ``blocks``, its rows written where the emitter wants them."""
        arrays = assemble(blocks, rows, options.seq_len, options.mode, bool(slots), _arena_rows)
        return self._to_batch(arrays, slots)

    def _to_batch(self, arrays: dict[str, Any], slots: dict[str, np.ndarray]) -> dict[str, Any]:
        placed = {id(arrays[key]) for key in ("input_ids", "labels", "position_ids", "cu_seqlens")}  # in the arena
        batch = to_tensors(arrays, tensor=lambda a: torch.from_numpy(a) if id(a) in placed else _tensor(a))
        for key, per_document in slots.items():  # slots make assemble add doc_index
            doc = arrays["doc_index"]
            batch[key] = _tensor(np.where(doc >= 0, per_document[np.maximum(doc, 0)], -1))
        if self.options.with_index:
            batch["_token_offset"] = _tensor(arrays["token_offset"])
        return batch


def _tensor(values: np.ndarray) -> torch.Tensor:
    """``values`` in a tensor allocated where the emitter wants it (a ring slot, the recycler)."""
    out = alloc(values.shape, _torch_dtype(values))
    out.numpy()[...] = values
    return out


def _arena_rows(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """(B, L) int64 rows and int32 ``cu_seqlens`` allocated where the emitter wants them:
    ``assemble`` writes in place."""
    return alloc_array(shape, np.dtype(dtype))


def _torch_dtype(values: np.ndarray) -> torch.dtype:
    return torch.int32 if values.dtype == np.int32 else torch.int64
