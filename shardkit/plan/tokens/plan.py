"""The token-block plan of one epoch at one resume level (specs/token-blocks.md TB1, TB6-TB8, TB11-TB13).

Pure. The **epoch order** of documents is the sample order of a one-consumer plan (seeded shard
order and in-window shuffle keyed by ``(seed, epoch)``; TB11), so document indices mean the same
at every level of a chain, whatever the topology. A level splits its pool among its consumers
(``split_work``); an elastic level's pool is the previous level's remainder (TB7).

The resume state reuses the plan state of specs/resume-state.md unchanged — levels, parents,
fingerprint, offsets — with offsets counting **blocks** (a multiple of the level's batch size),
plus the loader state's ``tokens`` part: the identity (field, mode, bos/eos), and per level its
cut (seq_len, long_docs, open_blocks) and each consumer's cutter state at its offset (TB5).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardkit.errors import StateError
from shardkit.plan.params import PlanParams
from shardkit.plan.plan import Plan, base_plan
from shardkit.plan.state import STATE_VERSION
from shardkit.plan.tokens.blocks import BlockCutter, BlockOptions, Piece, num_positions
from shardkit.plan.tokens.config import LEVEL_KEYS, TokenBlocks
from shardkit.plan.tokens.index import EpochIndex, segment_lengths
from shardkit.plan.tokens.lengths_source import ArrayLengths, LengthSource
from shardkit.plan.tokens.pack_count import CountShare
from shardkit.plan.tokens.pool import WorkSplit, consumer_state, remainder_pool, split_work

__all__ = ["TokenLevel", "TokenPlan", "build_token_plan", "epoch_order", "order_plan", "segment_lengths",
           "single_params", "token_yield_problem"]


def single_params(params: PlanParams) -> PlanParams:
    """``params`` for one consumer, batch 1, no tail: what the epoch order is planned with (TB11)."""
    return replace(params, world_size=1, num_workers=0, batch_size=1, tail="drop")


def order_plan(shard_sizes: Sequence[int] | np.ndarray, params: PlanParams) -> Plan:
    """The one-consumer sample plan whose sequence is the epoch order of documents (TB11)."""
    return base_plan(np.asarray(shard_sizes, dtype=np.int64), single_params(params))


def epoch_order(plan: Plan) -> np.ndarray:
    """Global (manifest-order) sample index of each document index, from :func:`order_plan`."""
    offsets = plan.shard_offsets
    parts = [w.global_indices(offsets) for w in plan.consumer_windows(0)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def epoch_index(shard_sizes: Sequence[int] | np.ndarray, lengths: np.ndarray | LengthSource, root: PlanParams,
                order: Plan, blocks: TokenBlocks, custom_order: bool) -> EpochIndex:
    """The epoch stream of ``order`` (TB25): from chunk totals when the order is the seeded
    shard order with in-window shuffles (no interleave, no mixture), else from arrays."""
    source = ArrayLengths(lengths) if isinstance(lengths, np.ndarray) else lengths
    if not custom_order and (root.interleave == 1 or not root.shuffle):
        return EpochIndex.windowed(np.asarray(shard_sizes, dtype=np.int64), single_params(root), order, source,
                                   blocks.extra_tokens, blocks.mode)
    samples = epoch_order(order)
    segments = segment_lengths(source.take(samples), blocks.extra_tokens)
    return EpochIndex.from_arrays(samples, segments, blocks.mode)


@dataclass
class TokenLevel:
    """One level: its plan params (``batch_size`` = blocks per batch), cut and split."""

    params: PlanParams
    cut: dict[str, Any]
    split: WorkSplit
    options: BlockOptions


@dataclass
class TokenPlan:
    """Which blocks each global consumer yields this epoch (the current level of a chain).

    Consumer ``c`` yields ``num_batches(c)`` batches of ``batch_size`` blocks from its work,
    starting after ``start_offsets[c]`` blocks. Duck-compatible with :class:`Plan` where the
    loader counts steps (``params``, ``start_offsets``, ``num_consumers``, ``num_batches``).
    """

    level: TokenLevel
    order: Plan  # the one-consumer sample plan of the epoch order
    index: EpochIndex  # the epoch stream: documents, their lengths and positions (TB25)
    start_offsets: tuple[int, ...]
    parent_state: dict[str, Any] | None
    cuts: list[dict[str, Any]]  # every level's cut, root first (this one last)
    parent_dropped: list[Piece] = field(default_factory=list)  # the ancestors' dropped tails (TB6)
    _replays: dict[int, tuple[int, BlockCutter]] = field(default_factory=dict, repr=False)
    _segments: np.ndarray | None = field(default=None, repr=False)
    saved_states: list[Any] | None = field(default=None, repr=False)  # the loaded level's, if exact
    saved_path: str = ""
    saved_checked: bool = False  # ... and this process checked them all (TB13), so they may be saved again

    @property
    def dropped(self) -> list[Piece]:
        """Every level's dropped tail (TB6)."""
        return [*self.parent_dropped, *self.level.split.dropped]

    @property
    def segments(self) -> np.ndarray:
        """Segment length per document index of the whole epoch: O(N), made on first use, for
        tests and audits; a consumer reads its own range (``token_consumer.consumer_view``)."""
        if self._segments is None:
            self._segments = self.index.docs(0, self.index.num_docs)[1]
        return self._segments

    @property
    def positions(self) -> np.ndarray:
        """Input positions per document index of the whole epoch (O(N), as ``segments``)."""
        return num_positions(self.segments, self.level.options.mode)

    @property
    def params(self) -> PlanParams:
        return self.level.params

    @property
    def num_consumers(self) -> int:
        return len(self.level.split.consumers)

    @property
    def steps_per_rank(self) -> int:
        return self.level.split.num_blocks // self.params.batch_size * self.params.workers_per_rank

    def num_batches(self, consumer: int) -> int:
        return self.level.split.num_blocks // self.params.batch_size

    def start_state(self, consumer: int) -> dict[str, Any]:
        """Consumer ``consumer``'s state where it resumes; a loaded state that is not it is a
        ``StateError`` (TB13): a worker checks its own consumer only."""
        state = self.consumer_state(consumer, self.start_offsets[consumer])
        if self.saved_states is not None:
            _refuse_edited(self.saved_path, consumer, self.saved_states[consumer], state)
        return state

    def check_saved(self) -> TokenPlan:
        """Every loaded consumer state against its offset (TB13: what loading a state checks)."""
        for consumer in range(self.num_consumers if self.saved_states is not None else 0):
            self.start_state(consumer)
        return self

    def consumer_state(self, consumer: int, blocks: int) -> dict[str, Any]:
        """Consumer ``consumer``'s cutter state after ``blocks`` blocks (TB5): in concat mode by
        binary search (TB25); in pack mode by running its cutter on positions, continued from
        the last state asked for when that was no later (each call costs the blocks since)."""
        work, options = self.level.split.consumers[consumer], self.level.options
        if options.mode == "concat":
            return consumer_state(work, options, blocks)
        done, cutter = self._replays.get(consumer, (0, None))
        if cutter is None or done > blocks:
            done, cutter = 0, BlockCutter(work.pieces, options)
        for _ in range(done, blocks):
            cutter.next_block()
        self._replays[consumer] = (blocks, cutter)
        return {**cutter.to_dict(), "blocks": blocks}

    def state_at(self, consumer: int, blocks: int, reported: dict[str, Any] | None = None) -> dict[str, Any]:
        """Consumer ``consumer``'s cutter state after ``blocks`` blocks: the one it ``reported``
        there (TB28), the loaded one while it is still there, else computed (``consumer_state``)."""
        return _reported(reported, blocks) or self._loaded(consumer, blocks) or self.consumer_state(consumer, blocks)

    def _loaded(self, consumer: int, blocks: int) -> dict[str, Any] | None:
        """The loaded state of ``consumer`` when it is still there (no batch since) and was checked."""
        if self.saved_checked and self.saved_states is not None and blocks == self.start_offsets[consumer]:
            return copy.deepcopy(self.saved_states[consumer])
        return None

    def to_state(self, offsets: Sequence[int], fingerprint: str) -> dict[str, Any]:
        """The plan state (specs/resume-state.md shape) after consumer ``c`` consumed
        ``offsets[c]`` blocks."""
        checked = _plan_offsets(self.level, list(offsets), "offsets")
        return {"version": STATE_VERSION, "fingerprint": fingerprint, "params": self.params.to_dict(),
                "offsets": checked, "parent": copy.deepcopy(self.parent_state)}

    def tokens_part(self, blocks: TokenBlocks, offsets: Sequence[int], saved: list[dict[str, Any]],
                    known: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
        """The loader state's ``tokens`` key: identity, and per level its cut and consumer
        states (``saved``: the ancestors' levels as loaded; this level's are ``known[c]`` where
        consumer ``c`` reported its state at its offset (TB28), else computed)."""
        if len(offsets) != self.num_consumers:
            raise StateError(f"{len(offsets)} offsets for {self.num_consumers} consumers")
        known = known or {}
        states = [self.state_at(c, int(k), known.get(c)) for c, k in enumerate(offsets)]
        levels = [copy.deepcopy(level) for level in saved[: len(self.cuts) - 1]]
        return {**blocks.identity(), "levels": [*levels, {**self.cuts[-1], "consumers": states}]}


def _reported(state: dict[str, Any] | None, blocks: int) -> dict[str, Any] | None:
    """A consumer's reported state when it is the one at ``blocks`` (TB28)."""
    return state if state is not None and state.get("blocks") == blocks else None


def token_yield_problem(plan: TokenPlan, where: str) -> str | None:
    """Why a fresh epoch of ``plan`` yields no batch (TB24, like partition.md P16), or None:
    ``tail="drop"`` and fewer blocks per consumer than one batch, though there are positions."""
    params, options = plan.params, plan.level.options
    total = plan.index.total
    if plan.level.split.num_blocks or params.tail != "drop" or total == 0:
        return None
    return (f"{where}: token blocks: the epoch yields no batch ({total} input positions in "
            f"{plan.index.num_docs} documents, seq_len {options.seq_len}, {options.mode} mode, batch_size "
            f"{params.batch_size} blocks, {plan.num_consumers} consumer(s), tail='drop'): a batch needs "
            f"{params.batch_size} blocks of {options.seq_len} positions per consumer; use tail='pad', a smaller "
            "seq_len or batch_size, or fewer consumers")


def _chain(resume: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The levels of a plan state, root first."""
    levels: list[dict[str, Any]] = []
    while resume is not None:
        levels.append(resume)
        resume = resume["parent"]
    return levels[::-1]


def build_token_plan(shard_sizes: Sequence[int] | np.ndarray, lengths: np.ndarray, params: PlanParams,
                     blocks: TokenBlocks, resume: dict[str, Any] | None = None,
                     cuts: Sequence[dict[str, Any]] = (),
                     order_of: Callable[[PlanParams], Plan] | None = None,
                     num_blocks: int | None = None, share: CountShare | None = None) -> TokenPlan:
    """The token plan of ``params.epoch`` (``lengths``: tokens per sample, manifest order).

    ``resume``: a plan state (already validated) whose level ``i`` cut is ``cuts[i]`` (this
    config's cut past ``cuts``; with,
    when loaded, its ``consumers`` states: checked against a replay of its offsets); like
    ``build_plan`` (R2-R5): when its last level has the same params and cut as now, the same
    plan resumes at its offsets; otherwise a new level splits the remainder (TB7, TB8).
    ``order_of(root params)``: the one-consumer plan of the epoch order (default
    :func:`order_plan` of ``shard_sizes``; a mixture's mixed sequence, TB15).
    ``num_blocks``: the current level's blocks per consumer when another process already counted
    this same plan (pack mode, TB27: a worker gets its loader's count), else counted here;
    ``share``: pack mode's count of the current level shared with other processes (TB29).
    """
    chain = _chain(resume)
    # levels past the given cuts were cut with this config (a continuation of this process, R10)
    cuts = [*cuts[: len(chain)], *[blocks.level()] * (len(chain) - len(cuts))]
    root = PlanParams.from_dict(chain[0]["params"]) if chain else params
    if chain and root.epoch != params.epoch:
        raise StateError(f"resume state is for epoch {root.epoch}, but the plan asked for epoch {params.epoch}")
    order = order_plan(shard_sizes, root) if order_of is None else order_of(single_params(root))
    index = epoch_index(shard_sizes, lengths, root, order, blocks, order_of is not None)
    pool: Any = index  # level 0: the epoch stream, never materialised in concat mode (TB25)
    dropped: list[Piece] = []
    exact = bool(chain) and PlanParams.from_dict(chain[-1]["params"]).same_partition(params) \
        and _cut(cuts[len(chain) - 1]) == blocks.level()
    parents = chain[:-1] if exact else chain
    for i, saved in enumerate(parents):
        level = _level(pool, PlanParams.from_dict(saved["params"]), cuts[i], blocks)
        offsets = _plan_offsets(level, saved["offsets"], f"state level {i}")
        states = [consumer_state(w, level.options, k) for w, k in zip(level.split.consumers, offsets, strict=True)]
        _check_saved(cuts[i], states, f"tokens.levels[{i}]")
        dropped += level.split.dropped
        pool = remainder_pool(level.split.consumers, states, level.options)
    current = _level(pool, params, blocks.level(), blocks, num_blocks, share)
    start = _plan_offsets(current, chain[-1]["offsets"], "state") if exact else [0] * len(current.split.consumers)
    parent = (chain[-1]["parent"] if exact else resume)
    level_cuts = [_cut(c) for c in cuts[: len(parents)]] + [blocks.level()]
    plan = TokenPlan(current, order, index, tuple(start), copy.deepcopy(parent), level_cuts, dropped)
    loaded = cuts[len(chain) - 1].get("consumers") if exact else None
    if loaded is not None:  # checked per consumer as it starts, all of them by check_saved (TB13)
        if not isinstance(loaded, list) or len(loaded) != plan.num_consumers:
            raise StateError(f"tokens.levels[{len(chain) - 1}].consumers: expected {plan.num_consumers} cutter "
                             f"states, got {loaded!r:.80}")
        plan.saved_states, plan.saved_path = loaded, f"tokens.levels[{len(chain) - 1}]"
    return plan


def _level(pool: Any, params: PlanParams, cut: dict[str, Any], blocks: TokenBlocks,
           num_blocks: int | None = None, share: CountShare | None = None) -> TokenLevel:
    options = blocks.block_options(_cut(cut))
    split = split_work(pool, params.num_consumers, params.batch_size, options, params.tail, num_blocks, share)
    return TokenLevel(params, _cut(cut), split, options)


def _cut(level: dict[str, Any]) -> dict[str, Any]:
    try:
        return {key: level[key] for key in LEVEL_KEYS}
    except (KeyError, TypeError):
        raise StateError(f"token state level: expected keys {list(LEVEL_KEYS)}, got {level!r}") from None


def _check_saved(level: dict[str, Any], states: list[dict[str, Any]], path: str) -> None:
    """A loaded level's consumer states must be the replay of its offsets (TB5)."""
    saved = level.get("consumers")
    if saved is None:
        return
    if not isinstance(saved, list) or len(saved) != len(states):
        raise StateError(f"{path}.consumers: expected {len(states)} cutter states, got {saved!r:.80}")
    for consumer, (got, want) in enumerate(zip(saved, states, strict=True)):
        _refuse_edited(path, consumer, got, want)


def _refuse_edited(path: str, consumer: int, got: Any, want: dict[str, Any]) -> None:
    if got != want:
        raise StateError(f"{path}.consumers[{consumer}]: saved cutter state {got!r:.120} is not the "
                         f"one its offset gives ({want!r:.120}); the state was edited or the data changed")


def _plan_offsets(level: TokenLevel, offsets: list[int], path: str) -> list[int]:
    total, batch = level.split.num_blocks, level.params.batch_size
    for consumer, offset in enumerate(offsets):
        if not 0 <= offset <= total or offset % batch:
            raise StateError(f"{path}.offsets[{consumer}]: expected a multiple of batch_size {batch} "
                             f"in 0..{total} (consumer {consumer}'s blocks), got {offset}")
    return [int(o) for o in offsets]

