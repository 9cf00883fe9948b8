"""I3, I4, I6: the vectorised index checks accept exactly the indices a per-block reading of
the rules accepts (the checks run once per shard open, so they were trimmed for spread reads,
specs/partition.md P21)."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import CorruptShardError
from shardkit.format.checksum import xxh64_int
from shardkit.format.shard_layout import BLOCK_DTYPE, HEADER_SIZE, decode_index, encode_index


def per_block_ok(blocks: np.ndarray, offsets: np.ndarray, end: int) -> bool:
    """The rules one block at a time: contiguous blocks ending at the index (I3, I4), and each
    block's sample offsets 0 ... raw size, never decreasing (I6)."""
    position, at = HEADER_SIZE, 0
    for block in blocks:
        if int(block["offset"]) != position:
            return False
        position += int(block["stored_size"])
        mine = [int(x) for x in offsets[at : at + int(block["num_samples"]) + 1]]
        at += int(block["num_samples"]) + 1
        if mine[0] != 0 or mine[-1] != int(block["raw_size"]) or any(b < a for a, b in itertools.pairwise(mine)):
            return False
    return position == end


@st.composite
def indices(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    counts = draw(st.lists(st.integers(0, 4), min_size=1, max_size=6))
    blocks = np.zeros(len(counts), dtype=BLOCK_DTYPE)
    offsets: list[int] = []
    position = HEADER_SIZE
    for i, count in enumerate(counts):
        steps = draw(st.lists(st.integers(0, 9), min_size=count, max_size=count))
        own = [0, *np.cumsum(steps).tolist()] if count else [0]
        raw = own[-1] if count else draw(st.integers(0, 9))
        stored = draw(st.integers(1, 50))
        blocks[i] = (position, stored, raw, count, 0, 0, b"\0\0", 0)
        offsets.extend(own[:-1] + [raw] if count else [raw])
        position += stored
    offsets_array = np.array(offsets, dtype="<u4")
    # corrupt one thing, or nothing
    kind = draw(st.sampled_from(["none", "offset", "sample", "raw", "end"]))
    end = position
    if kind == "offset":
        i = draw(st.integers(0, len(blocks) - 1))
        blocks["offset"][i] += draw(st.integers(1, 3))
    elif kind == "sample":
        j = draw(st.integers(0, len(offsets_array) - 1))
        offsets_array[j] += draw(st.integers(1, 20))
    elif kind == "raw":
        i = draw(st.integers(0, len(blocks) - 1))
        blocks["raw_size"][i] += 1
    elif kind == "end":
        end += draw(st.integers(-3, 3))
    return blocks, offsets_array, end


@settings(max_examples=300, deadline=None)
@given(indices())
def test_the_index_checks_accept_exactly_what_the_per_block_rules_accept(
    case: tuple[np.ndarray, np.ndarray, int],
) -> None:
    blocks, offsets, end = case
    index = encode_index(blocks, offsets)
    try:
        decode_index(index, xxh64_int(index), end, "s.sks")
        accepted = True
    except CorruptShardError:
        accepted = False
    assert accepted == per_block_ok(blocks, offsets, end)
