"""Batches collated straight from column blocks (loader/collate_columns.py, specs/shard-format.md B6).

The property: for any uniform block and any way a batch can be cut from one or more pieces of
it — consecutive runs (an unshuffled stream), permutations and repeats (a shuffled or padded
window) — ``collate_pieces`` gives exactly the batch that ``collate_samples`` gives for the
same samples as dicts: same tensors, dtypes, shapes, Ragged offsets and kinds, lists.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardkit.format import SampleEncoder
from shardkit.format.column_block import rows_to_columns
from shardkit.format.column_parse import parse_columns
from shardkit.loader.collate import collate_samples
from shardkit.loader.collate_columns import collate_pieces
from shardkit.read.column_pieces import ColumnPiece, JoinedColumn, join_pieces
from tests.helpers.columns import uniform_blocks
from tests.unit.loader.test_view_collation import assert_batch_equal


def _piece(block: list[dict[str, Any]]) -> ColumnPiece | None:
    encoder = SampleEncoder()
    raw = rows_to_columns(b"".join(encoder.encode(s) for s in block), len(block))
    if raw is None:
        return None
    return ColumnPiece(parse_columns(raw, len(block)), np.arange(len(block), dtype=np.int64))


@st.composite
def cuts(draw: st.DrawFn, n: int) -> list[np.ndarray]:
    """1–3 index arrays into a block of n samples: runs, shuffles and repeats."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            start = draw(st.integers(0, n - 1))
            out.append(np.arange(start, draw(st.integers(start + 1, n)), dtype=np.int64))
        else:
            out.append(np.array(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=12)), dtype=np.int64))
    return out


@st.composite
def cut_pieces(draw: st.DrawFn) -> list[ColumnPiece]:
    """The pieces of a batch cut from a uniform block that has a column form."""
    block = draw(uniform_blocks())
    piece = _piece(block)
    assume(piece is not None)  # the block stays rows (not smaller as columns)
    assert piece is not None
    return [piece.select(index) for index in draw(cuts(len(block)))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=cut_pieces())
def test_batches_from_columns_equal_batches_from_dicts(pieces):
    """Collated from columns, a batch equals the batch collated from the same samples as dicts."""
    piece = pieces[0]  # all pieces share the block's columns
    got = collate_pieces(pieces)
    if got is None:  # declined: only for u64 integer columns, which the dict path must handle
        assert any(c.kind == "int" and c.data.dtype.str == "<u8" for c in piece.columns)
        return
    assert_batch_equal(got, collate_samples([s for p in pieces for s in p.samples(views=True)]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=cut_pieces())
def test_joined_pieces_hold_the_same_samples(pieces):
    """A shuffled window joins its blocks' pieces into one (stream.read_window): same samples."""
    joined = join_pieces(pieces)
    assert joined is not None and len(joined) == sum(len(p) for p in pieces)
    want = [s for p in pieces for s in p.samples()]
    got = joined.samples()
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_batch_equal(g, w, "$sample")


def test_pieces_of_different_columns_are_declined():
    a = _piece([{"x": np.arange(30, dtype="<i4")} for _ in range(40)])
    b = _piece([{"x": np.arange(30, dtype="<i8")} for _ in range(40)])
    assert a is not None and b is not None
    assert collate_pieces([a, b]) is None and join_pieces([a, b]) is None


def test_blocks_whose_ints_were_narrowed_differently_still_join():
    """B3 narrows each block on its own (ids below 256 in one block, above in the next); the
    pieces of both still join and collate from columns (a shuffled window spans many blocks)."""
    small = _piece([{"id": i, "x": np.arange(30, dtype="<i4")} for i in range(40)])
    large = _piece([{"id": 70_000 + i, "x": np.arange(30, dtype="<i4")} for i in range(40)])
    assert small is not None and large is not None
    joined = join_pieces([small, large])
    assert joined is not None
    got = collate_pieces([small[5:9], large[0:3]])
    assert got is not None
    assert got["id"].tolist() == [5, 6, 7, 8, 70_000, 70_001, 70_002]


@st.composite
def window_pieces(draw: st.DrawFn) -> list[ColumnPiece]:
    """A shuffled window's pieces: cuts of 1-3 blocks (each parsed on its own, so each column
    has its own data array) of one uniform set of samples."""
    block = draw(uniform_blocks())
    splits = sorted(draw(st.sets(st.integers(1, len(block) - 1), max_size=2))) if len(block) > 1 else []
    bounds = [0, *splits, len(block)]
    pieces = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        piece = _piece(block[lo:hi])
        assume(piece is not None)
        assert piece is not None
        pieces += [piece.select(index) for index in draw(cuts(hi - lo))]
    assume(len({p.signature for p in pieces}) == 1)
    return pieces


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=window_pieces(), slack=st.sampled_from([0, 1 << 30]), data=st.data())
def test_windows_joined_in_place_collate_like_dicts(pieces, slack, data):
    """RP9: a window joined in place (its ragged columns pointing into the blocks) or copied
    (past the memory bound) gives, for any batch cut from it in any order, the batch of the same
    samples as dicts; the samples themselves are the pieces' in order."""
    joined = join_pieces(pieces, slack=slack)
    assert joined is not None
    want = [s for p in pieces for s in p.samples(views=True)]
    for got, wanted in zip(joined.samples(views=True), want, strict=True):
        assert_batch_equal(got, wanted, "$sample")
    order = np.array(data.draw(st.permutations(range(len(want)))), dtype=np.int64)
    shuffled = joined.select(order)
    cut = data.draw(st.integers(0, len(order)))
    batch = collate_pieces([shuffled[:cut], shuffled[cut:]] if 0 < cut < len(order) else [shuffled])
    if batch is None:
        return
    assert_batch_equal(batch, collate_samples([want[i] for i in order.tolist()]))


def test_a_window_joins_in_place_within_the_bound_and_copies_past_it():
    """RP9: rows joined in place point into the blocks (no copy of the data) while the blocks
    hold at most 2x the rows' bytes + slack; a few rows of big blocks are copied instead."""
    blocks = [_piece([{"x": np.full(1000, b * 100 + i, dtype="<i4")} for i in range(50)]) for b in range(3)]
    assert all(block is not None for block in blocks)
    pieces = [block[10:40] for block in blocks if block is not None]
    joined = join_pieces(pieces)
    assert joined is not None
    column = joined.columns[0]
    assert isinstance(column, JoinedColumn) and len(column.parts) == 3
    assert all(part is block.columns[0].data for part, block in zip(column.parts, blocks, strict=True) if block)
    few = join_pieces([block[0:1] for block in blocks if block is not None], slack=0)
    assert few is not None and not isinstance(few.columns[0], JoinedColumn)
    assert few.samples()[2]["x"][0] == 200
