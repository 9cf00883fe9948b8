"""Token rows (specs/token-blocks.md TB2-TB4): ``input_ids``, ``labels``, ``position_ids`` and
``cu_seqlens`` against a slow reference that walks explicit Python token lists."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import PlanError
from shardkit.plan.tokens.blocks import Block, BlockCutter, BlockOptions, Piece, epoch_pieces, num_positions
from shardkit.plan.tokens.rows import IGNORE_INDEX, TokenDocs, TokenOptions, assemble

BOS, EOS, PAD = 1, 2, 0


def _segments(docs, masks, bos, eos):
    """Explicit lists of (token, loss_mask) per document; empty documents stay empty."""
    out = []
    for doc, mask in zip(docs, masks, strict=True):
        seg = [(int(t), bool(m)) for t, m in zip(doc, mask, strict=True)]
        if seg:
            seg = [(BOS, True)] * bos + seg + [(EOS, True)] * eos
        out.append(seg)
    return out


def _reference(blocks, segs, seq_len, mode, mask_doc_starts):
    """One position at a time: the label is the next token of the same segment, or (concat) the
    first token of the next non-empty document; position ids restart where (doc, offset) jumps."""
    rows, seqlens = [], []
    for block in blocks:
        ids, labels, positions = [], [], []
        prev = None
        for p in block.pieces:
            for o in range(p.start, p.stop):
                seg = segs[p.doc_index]
                ids.append(seg[o][0])
                if o + 1 < len(seg):
                    token, keep = seg[o + 1]
                else:
                    later = [s for s in segs[p.doc_index + 1:] if s]
                    usable = mode == "concat" and later and not mask_doc_starts
                    token, keep = later[0][0] if usable else (0, False)
                labels.append(token if keep else IGNORE_INDEX)
                if prev == (p.doc_index, o - 1):
                    positions.append(positions[-1] + 1)
                    seqlens[-1] += 1
                else:
                    positions.append(0)
                    seqlens.append(1)
                prev = (p.doc_index, o)
        pad = seq_len - len(ids)
        ids += [PAD] * pad
        labels += [IGNORE_INDEX] * pad
        positions += [0] * pad
        if pad:
            seqlens.append(pad)
        rows.append((ids, labels, positions))
    return rows, np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=10),
    mode=st.sampled_from(["concat", "pack"]),
    seq_len=st.integers(1, 10),
    bos=st.booleans(),
    eos=st.booleans(),
    mask_doc_starts=st.booleans(),
    dtype=st.sampled_from([np.uint16, np.int32, np.int64]),
)
def test_rows_match_the_reference(data, lengths, mode, seq_len, bos, eos, mask_doc_starts, dtype):
    """TB4: labels are the next token (ignore index at padding, at masked targets and, when
    asked, at document starts), position ids restart per segment, cu_seqlens ends at B×L."""
    docs = [np.array(data.draw(st.lists(st.integers(3, 900), min_size=n, max_size=n)), dtype=dtype) for n in lengths]
    masks = [np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool) for n in lengths]
    options = TokenOptions(eos_id=EOS if eos else None, bos_id=BOS if bos else None, pad_id=PAD,
                           mask_doc_starts=mask_doc_starts)
    token_docs = TokenDocs(docs, options, masks)
    cutter = BlockCutter(epoch_pieces(num_positions(token_docs.segment_lengths, mode)),
                         BlockOptions(seq_len, mode, open_blocks=2))
    blocks = []
    while (block := cutter.next_block()) is not None:
        blocks.append(block)
    blocks.append(Block((), seq_len))  # an all-padding block, as the tail of a padded split
    got = assemble(blocks, token_docs, seq_len, mode)
    rows, cu = _reference(blocks, _segments(docs, masks, bos, eos), seq_len, mode, mask_doc_starts)
    assert got["input_ids"].tolist() == [r[0] for r in rows]
    assert got["labels"].tolist() == [r[1] for r in rows]
    assert got["position_ids"].tolist() == [r[2] for r in rows]
    assert got["cu_seqlens"].tolist() == cu.tolist() and got["cu_seqlens"].dtype == np.int32
    assert got["max_seqlen"] == int(np.diff(cu).max())
    assert got["num_tokens"] + got["num_padding"] == len(blocks) * seq_len
    assert int((got["doc_index"] >= 0).sum()) == got["num_tokens"]
    for key in ("input_ids", "labels", "position_ids"):
        assert got[key].dtype == np.int64


def test_a_worked_concat_example():
    """TB4: ``a b`` and ``c d e`` with EOS, seq_len 4: the last label of a block is the first
    input of the next; the EOS of the last document has no target."""
    docs = [np.array([10, 11]), np.array([20, 21, 22])]
    token_docs = TokenDocs(docs, TokenOptions(eos_id=EOS))
    blocks = [Block((Piece(0, 0, 3), Piece(1, 0, 1)), 0), Block((Piece(1, 1, 4),), 1)]
    got = assemble(blocks, token_docs, 4, "concat")
    assert got["input_ids"].tolist() == [[10, 11, EOS, 20], [21, 22, EOS, PAD]]
    assert got["labels"].tolist() == [[11, EOS, 20, 21], [22, EOS, IGNORE_INDEX, IGNORE_INDEX]]
    assert got["position_ids"].tolist() == [[0, 1, 2, 0], [0, 1, 2, 0]]
    assert got["cu_seqlens"].tolist() == [0, 3, 4, 7, 8]


def test_a_loss_mask_of_the_wrong_length_names_the_document():
    token_docs = TokenDocs([np.array([5, 6, 7])], TokenOptions(), [np.array([1, 0])])
    with pytest.raises(PlanError, match="document 0: loss_mask has 2 entries for 3 tokens"):
        assemble([Block((Piece(0, 0, 3),), 0)], token_docs, 3, "concat")


def test_the_spec_worked_example_killed_and_resumed_with_a_shorter_seq_len():
    """specs/token-blocks.md worked example: the labels after an elastic resume with seq_len 2
    and 2 consumers are those of the uninterrupted run (TB7, TB8)."""
    from shardkit.plan.tokens.blocks import BlockOptions, epoch_pieces, num_positions
    from shardkit.plan.tokens.pool import consumer_blocks, remainder_pool, split_work

    docs = TokenDocs([np.array([10, 11]), np.array([], dtype=np.int64), np.array([20, 21, 22])],
                     TokenOptions(eos_id=EOS))
    options = BlockOptions(4)
    work = split_work(epoch_pieces(num_positions(docs.segment_lengths, "concat")), 1, 1, options).consumers[0]
    cutter = BlockCutter(work.pieces, options)
    first = cutter.next_block()
    state = {**cutter.to_dict(), "blocks": 1}
    assert state == {"blocks": 1, "piece_index": 1, "doc_index": 2, "token_offset": 1, "carry": []}
    assert assemble([first], docs, 4, "concat")["labels"].tolist() == [[11, EOS, 20, 21]]
    pool = remainder_pool([work], [state], options)
    assert pool == [Piece(2, 1, 4)]
    split = split_work(pool, 2, 1, BlockOptions(2))
    rows = [assemble(consumer_blocks(w, BlockOptions(2)), docs, 2, "concat") for w in split.consumers]
    assert [r["input_ids"].tolist() for r in rows] == [[[21, 22]], [[EOS, PAD]]]
    assert [r["labels"].tolist() for r in rows] == [[[22, EOS]], [[IGNORE_INDEX, IGNORE_INDEX]]]
