"""Token work split among consumers with equal steps, and the remainder pool of an elastic
resume (specs/token-blocks.md, TB6-TB8). Pure.

``split_work(pool, num_consumers, batch_size, options, tail)`` gives every consumer the same
number of blocks ``num_blocks`` (a multiple of ``batch_size``):

- concat: the pool's positions (in order) are cut into consecutive ranges of exactly
  ``num_blocks × seq_len`` positions, consumer ``c`` taking range ``c``; ``tail='drop'`` takes
  ``num_blocks = ⌊P / (C·B·L)⌋·B`` and leaves the rest of the pool unassigned (reported as
  dropped); ``tail='pad'`` takes ``⌈P / (C·B·L)⌉·B`` and the last ranges end in padding.
- pack: whole pieces go to consumers by their start position — consumer ``c`` takes the pieces
  starting in ``[c·P/C, (c+1)·P/C)`` — each consumer's cutter is run once on positions only to
  count its blocks ``k_c``; ``num_blocks`` is ``min k_c`` rounded down to ``B`` (drop: blocks
  past it are dropped) or ``max k_c`` rounded up to ``B`` (pad: missing blocks are all padding).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.tokens.blocks import Block, BlockCutter, BlockOptions, Piece
from shardkit.plan.tokens.pack_count import CountShare, count_pack_blocks, group_bounds
from shardkit.plan.tokens.pieces import Pieces


class Pool(Protocol):
    """What a concat split needs of a pool: a :class:`Pieces`, or the level-0 stream
    (``token_index.EpochIndex``) that never materialises its pieces."""

    @property
    def total(self) -> int: ...

    def cut(self, begin: int, end: int) -> Pieces: ...

    def locate(self, position: int) -> tuple[int, int, int]: ...

    def __len__(self) -> int: ...


_NONE = (1 << 63) - 1  # the least count of no consumer


class ConsumerWork:
    """One consumer's pieces and the number of blocks it yields (padding blocks included).

    A concat consumer's work is positions ``[begin, end)`` of its level's pool (``span``): its
    pieces are cut from the pool when first asked for, and its cutter state after any number of
    blocks is two binary searches of the pool (TB25), so a plan of many consumers holds none of
    their pieces until a consumer reads."""

    __slots__ = ("_pieces", "num_blocks", "span", "_bounds", "_source")

    def __init__(self, pieces: Sequence[Piece] | None, num_blocks: int,
                 span: tuple[Pool, int, int] | None = None, source: Callable[[], Pieces] | None = None) -> None:
        self._pieces, self.num_blocks, self.span = pieces, int(num_blocks), span
        self._bounds: tuple[int, int] | None = None
        self._source = source  # or: the pieces, made when first asked for (a pack group, TB27)

    def piece_bounds(self) -> tuple[int, int]:
        """Of a work cut from a pool: the pool index of its first piece and its piece count."""
        if self._bounds is None:
            pool, begin, end = self.span  # type: ignore[misc]
            if begin >= end:
                self._bounds = (0, 0)
            else:  # the next work's start says where this one's last piece is (one search shared)
                first = pool.locate(begin)[2]
                if end >= pool.total:
                    last = len(pool) - 1
                elif isinstance(pool, Pieces):  # two pieces of one document may meet at ``end``
                    last = pool.locate(end - 1)[2]
                else:  # the stream: one piece per document, so offset 0 starts a piece
                    _, offset, rank = pool.locate(end)
                    last = rank if offset else rank - 1
                self._bounds = (first, last + 1 - first)
        return self._bounds

    @property
    def pieces(self) -> Sequence[Piece]:
        if self._pieces is None:
            if self.span is None:
                self._pieces = self._source()  # type: ignore[misc]
            else:
                pool, begin, end = self.span
                self._pieces = pool.cut(begin, end)
        return self._pieces

    def __repr__(self) -> str:
        return f"ConsumerWork({self.pieces!r}, {self.num_blocks})"


class WorkSplit:
    """The consumers' works of one level and the pieces no consumer is given (drop tail)."""

    def __init__(self, consumers: list[ConsumerWork],
                 dropped: Sequence[Piece] | Callable[[], Sequence[Piece]] = ()) -> None:
        self.consumers = consumers
        self._dropped = dropped

    @property
    def dropped(self) -> Sequence[Piece]:
        if callable(self._dropped):
            self._dropped = self._dropped()
        return self._dropped

    @property
    def num_blocks(self) -> int:
        return self.consumers[0].num_blocks if self.consumers else 0


def _check(num_consumers: int, batch_size: int, tail: str) -> None:
    if num_consumers < 1 or batch_size < 1:
        raise PlanError(f"num_consumers and batch_size must be >= 1, got {num_consumers}, {batch_size}")
    if tail not in ("drop", "pad"):
        raise PlanError(f"tail must be 'drop' or 'pad', got {tail!r}")


def cut_range(pool: Sequence[Piece], begin: int, end: int) -> Pieces:
    """The pieces covering pool positions ``[begin, end)`` (positions counted along the pool):
    two binary searches over the pool's running position totals."""
    return Pieces.of(pool).cut(begin, end)


def as_pool(pool: Any) -> Pool:
    """``pool`` itself when it is a :class:`Pieces` or the stream index, else its pieces as arrays."""
    return pool if hasattr(pool, "locate") else Pieces.of(pool)


def split_work(pool: Sequence[Piece] | Pool, num_consumers: int, batch_size: int, options: BlockOptions,
               tail: str = "pad", num_blocks: int | None = None, share: CountShare | None = None) -> WorkSplit:
    """TB6. ``num_blocks``: pack mode's step count when already known (the same split, counted
    by another process, TB27): no consumer's blocks are counted here. ``share``: pack mode's
    count shared with other processes (TB29): only its consumers are counted here."""
    _check(num_consumers, batch_size, tail)
    if options.mode == "concat":
        return _split_concat(pool, num_consumers, batch_size, options.seq_len, tail)
    return _split_pack(pool, num_consumers, batch_size, options, tail, num_blocks, share)


def _split_concat(pool: Any, c: int, b: int, seq_len: int, tail: str) -> WorkSplit:
    """TB6 concat, O(C): each consumer's work is a range of the pool, cut when it is read."""
    pool = as_pool(pool)
    total = pool.total
    per_step = c * b * seq_len
    steps = total // per_step if tail == "drop" else -(-total // per_step)
    span = steps * b * seq_len
    consumers = [ConsumerWork(None, steps * b, (pool, min(i * span, total), min((i + 1) * span, total)))
                 for i in range(c)]
    return WorkSplit(consumers, lambda: pool.cut(c * span, total))


def consumer_state(work: ConsumerWork, options: BlockOptions, blocks: int) -> dict[str, Any]:
    """The cutter state of ``work`` after ``blocks`` blocks (TB5). Concat: the cursor is position
    ``blocks × seq_len`` of the work, found by binary search, never by replaying the cutter (TB25);
    pack: a replay on positions (its open blocks depend on every piece before)."""
    pieces = work._pieces
    if options.mode != "concat" or (pieces is not None and not Pieces.of(pieces).positive):
        cutter = BlockCutter(work.pieces, options)
        for _ in range(blocks):
            cutter.next_block()
        return {**cutter.to_dict(), "blocks": blocks}
    if work.span is None:
        work = ConsumerWork(None, work.num_blocks, (Pieces.of(work.pieces), 0, Pieces.of(work.pieces).total))
    pool, begin, end = work.span  # type: ignore[misc]
    first, count = work.piece_bounds()
    cursor = begin + blocks * options.seq_len
    if cursor >= end:
        return {"piece_index": count, "doc_index": -1, "token_offset": 0, "carry": [], "blocks": blocks}
    doc, offset, rank = pool.locate(cursor)
    return {"piece_index": rank - first, "doc_index": doc, "token_offset": offset, "carry": [], "blocks": blocks}


def count_blocks(pieces: Sequence[Piece], options: BlockOptions) -> int:
    """The blocks ``BlockCutter(pieces, options)`` yields (pack: counted without cutting, TB27)."""
    if options.mode == "pack":
        return count_pack_blocks(pieces, options)
    cutter, n = BlockCutter(pieces, options), 0
    while cutter.next_block() is not None:
        n += 1
    return n


def all_pieces(pool: Any) -> Pieces:
    """Every piece of ``pool`` as arrays (the stream index materialised: O(N))."""
    return pool.materialize() if hasattr(pool, "materialize") else Pieces.of(pool)


def _split_pack(pool: Any, c: int, b: int, options: BlockOptions, tail: str, known: int | None = None,
                share: CountShare | None = None) -> WorkSplit:
    if (known is not None or share is not None) and hasattr(pool, "piece_start_from"):  # the stream: lazy groups
        works = [ConsumerWork(None, known or 0, source=functools.partial(_stream_group, pool, i, c)) for i in range(c)]
    else:
        pool = all_pieces(pool)
        bounds = group_bounds(pool, c).tolist()
        works = [ConsumerWork(pool[bounds[i]:bounds[i + 1]], 0) for i in range(c)]
    counted: list[list[int]] = []

    def counts() -> list[int]:
        if not counted:
            counted.append([count_blocks(w.pieces, options) for w in works])
        return counted[0]

    if known is not None:
        num_blocks = known
    elif share is not None:  # this process's consumers only; the least / most agreed with the others (TB29)
        mine = [count_blocks(works[i].pieces, options) for i in share.consumers if i < c]
        num_blocks = share.blocks((min(mine, default=_NONE) if tail == "drop" else max(mine, default=0)), b, tail)
    elif tail == "drop":
        num_blocks = min(counts()) // b * b
    else:
        num_blocks = -(-max(counts()) // b) * b
    for w in works:
        w.num_blocks = num_blocks

    def dropped() -> list[Piece]:  # blocks past num_blocks (drop tail): cut only when asked for
        out: list[Piece] = []
        for w, k in zip(works, counts(), strict=True):
            if k <= num_blocks:
                continue
            cutter = BlockCutter(w.pieces, options)
            for _ in range(num_blocks):
                cutter.next_block()
            while (block := cutter.next_block()) is not None:
                out.extend(block_pieces(block))
        return out

    return WorkSplit(works, dropped if tail == "drop" else [])


def _stream_group(pool: Any, consumer: int, num_consumers: int) -> Pieces:
    """TB6 pack group ``consumer`` of the stream: the whole pieces starting in
    ``[⌈c·P/C⌉, ⌈(c+1)·P/C⌉)`` (the last takes the rest) — what ``group_bounds`` assigns over
    the materialised pool — found by two searches (TB27)."""
    total = pool.total
    begin = pool.piece_start_from(-(-consumer * total // num_consumers))
    last = consumer == num_consumers - 1
    end = total if last else pool.piece_start_from(-(-(consumer + 1) * total // num_consumers))
    return pool.cut(begin, end)


def consumer_blocks(work: ConsumerWork, options: BlockOptions, state: dict | None = None) -> list[Block]:
    """All blocks ``work`` yields from ``state`` on (padding-only blocks at the tail included)."""
    cutter = BlockCutter(work.pieces, options) if state is None else BlockCutter.from_dict(work.pieces, options, state)
    done = 0 if state is None else int(state.get("blocks", 0))
    out = []
    for _ in range(done, work.num_blocks):
        block = cutter.next_block()
        out.append(block if block is not None else Block((), options.seq_len))
    return out


def block_pieces(block: Block) -> list[Piece]:
    """A block's positions as pieces, truncated ones included (they are dropped only when consumed)."""
    return [*block.pieces, *block.truncated]


def remainder_pool(works: Sequence[ConsumerWork], states: Sequence[dict], options: BlockOptions) -> Pieces:
    """The pieces of every consumer's unconsumed blocks, consumer by consumer, block by block (TB7).

    ``states[c]`` is consumer ``c``'s cutter state at its consumed boundary (``BlockCutter.to_dict``
    plus ``"blocks"``, the number of blocks consumed). Pieces dropped at this level (drop tail)
    stay dropped; positions a consumed block truncated stay truncated.
    """
    if len(states) != len(works):
        raise PlanError(f"{len(states)} token-block states for {len(works)} consumers")
    pool: list[Piece] = []
    for work, state in zip(works, states, strict=True):
        for block in consumer_blocks(work, options, state):
            pool.extend(block_pieces(block))
    return Pieces.of(pool)


def document_needs(pieces: Sequence[Piece], positions: Any,
                   next_doc: Any) -> list[tuple[int, int]]:
    """The documents ``pieces`` read, in the order first needed, each with the index of the last
    piece that needs it (TB12): a piece's document and, with ``next_doc`` (concat mode), the next
    non-empty document when the piece ends its document (that document's first token is a label)."""
    work = Pieces.of(pieces)
    docs, uses = work.doc, np.arange(len(work), dtype=np.int64)
    crosses = None if next_doc is None else (work.stop == positions[work.doc]) & (next_doc[work.doc] >= 0)
    if len(docs) and np.all(docs[1:] > docs[:-1]):  # one piece per document, in order (a level-0 work)
        targets = None if crosses is None else np.where(crosses, next_doc[work.doc], -1)
        if targets is None or np.all((targets[:-1] < 0) | (targets[:-1] == docs[1:])):
            needs = list(zip(docs.tolist(), uses.tolist(), strict=True))
            return needs if targets is None or targets[-1] < 0 else [*needs, (int(targets[-1]), len(docs) - 1)]
    if crosses is not None:
        docs = np.stack([work.doc, np.where(crosses, next_doc[work.doc], -1)], axis=1).reshape(-1)
        uses = np.repeat(uses, 2)
        docs, uses = docs[docs >= 0], uses[docs >= 0]
    unique, first = np.unique(docs, return_index=True)
    _, from_end = np.unique(docs[::-1], return_index=True)
    last = uses[len(docs) - 1 - from_end]
    order = np.argsort(first, kind="stable")
    return list(zip(unique[order].tolist(), last[order].tolist(), strict=True))
