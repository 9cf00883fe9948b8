"""The batching of token blocks: a step is ``batch_size`` blocks of ``seq_len`` positions
(specs/token-blocks.md).

The step plan is a :class:`TokenPlan` (positions from per-document lengths, plan/tokens/plan.py)
over the source's epoch order — the one-consumer plan of its elements (TB11): one dataset's
samples, a weighted dataset's multiset (a repeated sample is two documents, SW11) or a mixture's
mixed documents (TB15). Each consumer cuts its work into blocks (plan/tokens/blocks.py), reads
the documents it needs (``source.documents``) and fills the rows (plan/tokens/rows.py). Through
``ShardLoader`` the consumed boundary is the usual one, counted in blocks; the loader state's
``plan`` is the token plan state and ``tokens`` its token part (TB5, TB7, TB13), which reaches
workers through the control block (L6). In ``order="global"`` the plan is a
:class:`GlobalTokenPlan` (one token stream cut into global batches of blocks, its state one
stream position: TB30-TB34, ``loader/global_tokens.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from shardkit.errors import PlanError, StateError
from shardkit.loader import global_tokens
from shardkit.loader.emitter import Emitter
from shardkit.loader.epoch_check import log_once
from shardkit.loader.loader_state import LoaderState
from shardkit.loader.mixture_state import SOURCES_KEY
from shardkit.loader.resume_check import block_head, window_head
from shardkit.loader.token_batch import batch_blocks, to_tensors
from shardkit.loader.transfer.arena import alloc, alloc_array
from shardkit.plan import PlanParams
from shardkit.plan.global_order.state import is_global_state
from shardkit.plan.tokens.blocks import BlockCutter, BlockOptions
from shardkit.plan.tokens.concat_rows import ConcatRows
from shardkit.plan.tokens.config import IDENTITY_KEYS, TokenBlocks
from shardkit.plan.tokens.consumer import consumer_view
from shardkit.plan.tokens.global_blocks import GlobalTokenPlan, global_token_state
from shardkit.plan.tokens.pack_count import CountShare
from shardkit.plan.tokens.pieces import Pieces
from shardkit.plan.tokens.plan import TokenPlan, build_token_plan, token_yield_problem
from shardkit.plan.tokens.rows import TokenDocs, assemble
from shardkit.plan.tokens.state_check import check_token_part, plan_depth
from shardkit.storage import ShardCache

TOKENS_KEY = "tokens"  # the loader state's token part
TRANSFER_BATCHES = 8  # batches per DataLoader item by default (X8): a block batch takes ~0.1 ms to make,
# so DataLoader's per-item cost (queues, feeder thread, unpickling) weighed on it at 4 (benchmarks T6)
PREFETCH_BATCHES, PREFETCH_TOTAL = 96, 1024  # batches in flight per worker / over all workers (TB19)
PREFETCH_BYTES = 64 << 20  # per worker: the (B, L) int64 rows of the batches in flight
KEPT_COUNTS = 4  # pack plans' counts kept for workers (TB27): the loader's plan and len()'s


class TokenBatching:
    """Batches of ``batch_size`` token blocks cut as ``tokens`` says. ``with_index=True`` adds,
    per slot, ``_index`` (the document's sample index, -1 at padding) and ``_token_offset``
    (the position in its segment), for audits (TB14)."""

    yields_tokens = True
    part_keys = frozenset({TOKENS_KEY})

    def __init__(self, tokens: TokenBlocks, where: str) -> None:
        if not isinstance(tokens, TokenBlocks):
            raise TypeError(f"tokens: expected a shardkit.TokenBlocks, got {type(tokens).__name__}")
        self.tokens, self.where = tokens, where
        self._cuts: list[dict[str, Any]] = []  # the loaded state's token levels (with consumer states)
        self._cuts_epoch: int | None = None  # ... which belong to this epoch's chains only
        self._pack_blocks: dict[str, int] = {}  # pack plans' blocks per consumer, counted by the loader (TB27)
        self._counted: dict[str, int] = {}  # ... and those this process counted, for its workers
        self._checked = False  # whether this process checked the loaded levels' consumer states (TB13)
        self._global_seq_len = tokens.seq_len  # global order: the loaded state's seq_len (TB33)

    # ---- the plan -------------------------------------------------------------------------------
    def step_plan(self, source: Any, params: PlanParams, resume: dict[str, Any] | None, group: int = 1,
                  share: CountShare | None = None) -> TokenPlan | GlobalTokenPlan:
        """``group``: batches per DataLoader item, which deal global order's batches (TB31).
        ``share``: pack mode, this rank's share of the count, agreed with the others (TB29); a
        count known for this plan is agreed on as it is (every rank makes the same collective)."""
        if params.order == "global":
            return global_tokens.global_plan(source, params, self.tokens, resume, group, self.where)
        cuts = self._loaded_cuts(params.epoch) if resume is not None else []
        key = repr((params, resume))  # pack: a worker takes its loader's count of this same plan (TB27)
        known = self._pack_blocks.get(key, self._counted.get(key))
        if known is not None and share is not None:
            known = share.blocks(known, params.batch_size, params.tail)
        plan = self._build(source, params, self.tokens, resume, cuts, known, share if known is None else None)
        plan.saved_checked = self._checked and plan.saved_states is not None
        if plan.level.options.mode == "pack":
            counted = {k: v for k, v in self._counted.items() if k != key}
            self._counted = {**dict(list(counted.items())[-(KEPT_COUNTS - 1):]), key: plan.level.split.num_blocks}
        if resume is None and not plan.level.split.num_blocks:
            self._check_yield(source, plan)
        return plan

    def agree(self, plan: TokenPlan, share: CountShare) -> None:
        """A plan already made takes part in its count's agreement as it is (TB29)."""
        params = plan.params
        if share.blocks(plan.level.split.num_blocks, params.batch_size, params.tail) != plan.level.split.num_blocks:
            raise PlanError(f"{self.where}: token blocks: the ranks' pack plans disagree on the blocks per "
                            f"consumer (this rank's: {plan.level.split.num_blocks})")

    def _build(self, source: Any, params: PlanParams, tokens: TokenBlocks, resume: dict[str, Any] | None,
               cuts: list[dict[str, Any]], num_blocks: int | None = None,
               share: CountShare | None = None) -> TokenPlan:
        """The token plan over ``source``'s epoch order of ``params.epoch`` (one plain dataset's
        order is the index's own, never materialised: TB25; others give their one-consumer plan)."""
        lengths = source.token_lengths(tokens.field, params.epoch)
        return build_token_plan(source.shard_sizes(params.epoch), lengths, params, tokens, resume, cuts,
                                order_of=source.token_order(), num_blocks=num_blocks, share=share)

    def _check_yield(self, source: Any, plan: TokenPlan) -> None:
        """A fresh epoch with no batch (TB24, like P16): a ``PlanError`` when one consumer would
        get none either (no batch on any topology), else logged once (check_plan)."""
        problem = token_yield_problem(plan, self.where)
        if problem is None:
            return
        alone = replace(plan.params, world_size=1, num_workers=0)
        if plan.num_consumers == 1 or not self._build(source, alone, self.tokens, None, []).level.split.num_blocks:
            raise PlanError(problem)
        log_once(problem)

    def _loaded_cuts(self, epoch: int) -> list[dict[str, Any]]:
        """The loaded state's token levels when ``epoch`` is its epoch (later epochs start fresh)."""
        return self._cuts if epoch == self._cuts_epoch else []

    # ---- the loader state's token part ------------------------------------------------------------
    def plan_state(self, plan: Any, offsets: Sequence[int], fingerprint: str,
                   rank: int | None = None) -> dict[str, Any]:
        if isinstance(plan, GlobalTokenPlan):  # one stream position (TB33)
            return global_token_state(plan, offsets, fingerprint, rank)
        return dict(plan.to_state(list(offsets), fingerprint))

    def state_part(self, plan: Any, offsets: Sequence[int], known: dict[int, Any] | None = None) -> dict[str, Any]:
        """``known``: the cutter states consumers reported at ``offsets`` (TB28), not recomputed."""
        if isinstance(plan, GlobalTokenPlan):
            return {TOKENS_KEY: global_tokens.state_part(self.tokens, plan)}
        return {TOKENS_KEY: plan.tokens_part(self.tokens, list(offsets), self._loaded_cuts(plan.params.epoch), known)}

    def load_part(self, state: LoaderState, source: Any) -> None:
        if state.part(TOKENS_KEY) is None:
            raise StateError("loader state: saved without token blocks (it has no 'tokens' part), but this "
                             "dataset cuts token blocks; resume it with the dataset that saved it")
        if is_global_state(state.plan):  # its order was checked (R17): a stream position (TB33)
            self._global_seq_len = global_tokens.load_part(state.part(TOKENS_KEY), self.tokens)
            return
        part = check_token_part(state.part(TOKENS_KEY), plan_depth(state.plan))  # its shape first (TB22)
        for key in IDENTITY_KEYS:  # what a position is (TB8)
            if part.get(key) != getattr(self.tokens, key):
                raise StateError(f"loader state: token {key} is {part.get(key)!r}, this dataset's is "
                                 f"{getattr(self.tokens, key)!r}; a resume cannot change what a position is (TB8)")
        self._cuts, self._cuts_epoch = list(part["levels"]), state.epoch
        # The saved consumer states must be the replay of their offsets (TB5): rebuild the saved
        # level exactly as it was (its own params and cut).
        self._checked = False
        self._saved_levels(source, state.plan).check_saved()
        self._checked = True

    def saved_plan(self, source: Any, resume: dict[str, Any]) -> TokenPlan | GlobalTokenPlan:
        """The plan that saved ``resume`` (its own params and cut), at its offsets."""
        if is_global_state(resume):
            return global_tokens.saved_plan(source, self.tokens, self._global_seq_len, resume)
        return self._saved_levels(source, resume)

    def _saved_levels(self, source: Any, resume: dict[str, Any]) -> TokenPlan:
        cut = self._cuts[-1]
        tokens = replace(self.tokens, **{k: cut[k] for k in ("seq_len", "long_docs", "open_blocks")})
        return self._build(source, PlanParams.from_dict(resume["params"]), tokens, resume, self._cuts)

    # ---- workers: the loaded token levels travel in the control block (L6) ------------------------
    def payload(self) -> dict[str, Any]:
        return {TOKENS_KEY: {"epoch": self._cuts_epoch, "levels": self._cuts, "pack_blocks": self._counted}}

    def receive(self, payload: dict[str, Any]) -> bool:
        loaded = payload.get(TOKENS_KEY)
        self._pack_blocks = dict(loaded.get("pack_blocks", {})) if loaded is not None else {}
        if loaded is None or (loaded["epoch"], loaded["levels"]) == (self._cuts_epoch, self._cuts):
            return False
        self._cuts, self._cuts_epoch = loaded["levels"], loaded["epoch"]  # a persistent worker's old copy
        self._checked = False
        return True

    def transfer_batches(self) -> int | None:
        return TRANSFER_BATCHES

    def prefetch_batches(self, num_workers: int, params: PlanParams) -> int | None:
        """TB19: a worker makes a batch in well under a millisecond, so with DataLoader's in-order
        delivery a shallow queue leaves it idle whenever the trainer waits on the other worker's
        group; 12 groups in flight per worker (capped by the rows' bytes and the ring's slots)."""
        row_bytes = 3 * 8 * self.tokens.seq_len  # input_ids, labels, position_ids: int64
        cap = PREFETCH_BYTES // max(params.batch_size * row_bytes, 1)
        return max(1, min(PREFETCH_BATCHES, PREFETCH_TOTAL // max(num_workers, 1), cap))

    def collate_for(self, source: Any, pad: bool, with_index: bool) -> Callable[[Any], Any]:
        """Token batches are made whole by the batching (``Emitter.emit_made``), never collated."""
        return _no_collation

    def step_counts(self, batch: Any) -> tuple[Any, Any]:
        """What a step adds to the token counters of ``stats()`` (TB9)."""
        return batch["num_tokens"], batch["num_padding"]

    # ---- a consumer's batches (in its process) ----------------------------------------------------
    def batches(self, source: Any, plan: TokenPlan | GlobalTokenPlan, emitter: Emitter, cache: ShardCache | None,
                batch_size: int, with_index: bool) -> Iterator[Any]:
        consumer = emitter.consumer
        slots, sources = source.slot_arrays(plan.order, with_index)
        parts = (slots, sources, with_index, cache, batch_size)
        if isinstance(plan, GlobalTokenPlan):  # its block ranges, a chunk of whole units at a time (TB31, TB34)
            for first, count in plan.chunks(consumer, global_tokens.SPAN_POSITIONS):
                work, view = global_tokens.consumer_parts(plan, consumer, self.tokens.extra_tokens, first, count)
                yield from self._cut(source, plan, emitter, work, view, plan.options, None, parts, first == 0)
            return
        work = plan.level.split.consumers[consumer]
        view = consumer_view(plan, consumer, self.tokens.extra_tokens)  # its own documents only (TB26)
        yield from self._cut(source, plan, emitter, work, view, plan.level.options, plan.start_state(consumer), parts)

    def _cut(self, source: Any, plan: Any, emitter: Emitter, work: Any, view: Any, options: BlockOptions,
             start: dict[str, Any] | None, parts: tuple[Any, ...], head: bool = True) -> Iterator[Any]:
        """The batches of ``work`` from cutter state ``start``, its documents read as ``view`` says;
        ``head``: the first one names its head (R19)."""
        slots, sources, with_index, cache, batch_size = parts
        fields = (self.tokens.field, self.tokens.loss_mask_field)
        docs = source.documents(plan.order, fields, view.needs, cache, emitter.stats)
        docs.expect(view.num_tokens, view.positions)  # TB23
        rows = TokenDocs.from_lengths(docs, view.segments, self.tokens.token_options(),
                                      docs.masks if self.tokens.loss_mask_field is not None else None, view.next_doc)
        per_slot = bool(slots) or sources is not None  # the arrays need doc_index
        finish = functools.partial(self._finish, source, slots, sources, with_index)
        windows = options.mode == "concat" and self.tokens.loss_mask_field is None and work.pieces.positive
        cuts = (_windows(work, rows, options, batch_size, start, per_slot) if windows
                else _blocks(work, rows, options, batch_size, start, per_slot))
        for n, (make, count, cutter, first_head) in enumerate(cuts):
            if n == 0 and head:  # the first batch's BatchMeta names its head (R19); one int test after it (R22)
                emitter.head = first_head()
            yield emitter.emit_made(functools.partial(_then, make, finish), count,
                                    cutter.cursor_row(emitter.position + count))  # TB28
            if n == 0:
                emitter.head = ()
            docs.release(cutter.piece_index, cutter.open_documents)

    def _finish(self, source: Any, slots: dict[str, np.ndarray], sources: np.ndarray | None, with_index: bool,
                arrays: dict[str, Any]) -> dict[str, Any]:
        """The batch of ``arrays`` (its rows already where the emitter wants them) as tensors."""
        placed = {id(arrays[key]) for key in ("input_ids", "labels", "position_ids", "cu_seqlens")}  # in the arena
        batch = to_tensors(arrays, tensor=lambda a: torch.from_numpy(a) if id(a) in placed else _tensor(a))
        for key, per_document in slots.items():
            doc = arrays["doc_index"]
            batch[key] = _tensor(np.where(doc >= 0, per_document[np.maximum(doc, 0)], -1))
        if with_index:
            batch["_token_offset"] = _tensor(arrays["token_offset"])
        if sources is not None:  # a mixture's per-source counts, as a sample mixture's (MX10)
            batch[SOURCES_KEY] = source.block_tally(arrays["doc_index"], arrays["token_offset"], sources)
        return batch


Cut = tuple[Callable[[], dict[str, Any]], int, BlockCutter, Callable[[], tuple[int, ...]]]


def _blocks(work: Any, rows: TokenDocs, options: BlockOptions, batch_size: int, start: dict[str, Any] | None,
            provenance: bool) -> Iterator[Cut]:
    """Each batch as its blocks (pack mode, loss masks): ``assemble`` writes their rows."""
    for blocks, cutter in batch_blocks(work, options, batch_size, start):
        make = functools.partial(_rows_of, assemble, blocks, rows, options.seq_len, options.mode, provenance,
                                 count=_row_arrays(provenance))
        yield make, len(blocks), cutter, functools.partial(block_head, blocks)


def _windows(work: Any, rows: TokenDocs, options: BlockOptions, batch_size: int, start: dict[str, Any] | None,
             provenance: bool) -> Iterator[Cut]:
    """Concat mode: each batch as a window of the work's positions (TB35), no blocks made."""
    cutter = BlockCutter(work.pieces, options) if start is None else BlockCutter.from_dict(work.pieces, options, start)
    done = 0 if start is None else int(start["blocks"])
    stream = ConcatRows(Pieces.of(work.pieces), rows, options.seq_len, provenance)
    while done < work.num_blocks:
        count = min(batch_size, work.num_blocks - done)
        begin, taken = cutter.advance(count)
        done += count
        make = functools.partial(_rows_of, stream.rows, begin, taken, count, count=_row_arrays(provenance))
        head = functools.partial(window_head, work.pieces.locate, begin, begin + taken, count, options.seq_len)
        yield make, count, cutter, head


def _row_arrays(provenance: bool) -> int:
    """(B, L) int64 arrays of a token batch: input ids, position ids, labels (+ provenance's two)."""
    return 5 if provenance else 3


def _then(make: Callable[[], dict[str, Any]], finish: Callable[[dict[str, Any]], Any]) -> Any:
    return finish(make())


def _no_collation(cut: Any) -> Any:
    raise RuntimeError("token blocks are made whole (Emitter.emit_made), never collated from a cut of samples")


def _tensor(values: np.ndarray) -> torch.Tensor:
    """``values`` in a tensor allocated where the emitter wants it (a ring slot, the recycler)."""
    out = alloc(values.shape, torch.int32 if values.dtype == np.int32 else torch.int64)
    out.numpy()[...] = values
    return out


class _ArenaRows:
    """Where a batch's arrays are allocated (where the emitter wants them: ``assemble`` and
    ``ConcatRows.rows`` write in place): its ``count`` (B, L) int64 rows (input ids, position
    ids, labels, and with provenance document index and token offset) as one (count, B, L)
    array, one allocation per batch instead of one per row array (at ``num_workers=0`` each is
    a recycled buffer lent with a finaliser); anything else (``cu_seqlens``) on its own."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._stack: np.ndarray | None = None
        self._next = 0

    def __call__(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        if dtype != np.int64 or len(shape) != 2:
            return alloc_array(shape, dtype)
        stack = self._stack
        if stack is None or self._next == len(stack) or stack.shape[1:] != tuple(shape):
            stack = self._stack = alloc_array((self.count, *shape), dtype)
            self._next = 0
        self._next += 1
        return stack[self._next - 1]


def _rows_of(make: Callable[..., dict[str, Any]], *args: Any, count: int) -> dict[str, Any]:
    """``make(*args, empty)`` with a fresh :class:`_ArenaRows` of ``count`` row arrays."""
    return make(*args, _ArenaRows(count))
