"""Token-block batches as tensors (specs/token-blocks.md TB4, TB5): LM dtypes, and a consumer
killed after any batch continues from its JSON state with the same batches."""

from __future__ import annotations

import json

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.loader.token_batch import token_batches
from shardkit.plan.tokens.blocks import BlockOptions, epoch_pieces, num_positions
from shardkit.plan.tokens.pool import split_work
from shardkit.plan.tokens.rows import TokenDocs, TokenOptions


def _docs(lengths: list[int]) -> TokenDocs:
    rng = np.random.default_rng(len(lengths))
    return TokenDocs([rng.integers(3, 60_000, n).astype(np.uint16) for n in lengths], TokenOptions(eos_id=2, bos_id=1))


def test_batches_have_the_dtypes_lm_code_expects():
    docs = _docs([5, 0, 40, 7, 3])
    options = BlockOptions(8, "pack")
    work = split_work(epoch_pieces(num_positions(docs.segment_lengths, "pack")), 1, 2, options).consumers[0]
    batch, state = next(token_batches(work, docs, options, 2))
    assert batch["input_ids"].shape == (2, 8) and batch["input_ids"].dtype == torch.int64
    assert batch["labels"].dtype == torch.int64 and batch["position_ids"].dtype == torch.int64
    assert batch["cu_seqlens"].dtype == torch.int32 and int(batch["cu_seqlens"][-1]) == 16
    assert batch["num_tokens"] + batch["num_padding"] == 16
    assert state["blocks"] == 2 and json.loads(json.dumps(state)) == state


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=15), mode=st.sampled_from(["concat", "pack"]),
       seq_len=st.integers(2, 12), batch_size=st.integers(1, 3), kill=st.integers(0, 10))
def test_resuming_from_a_batch_state_gives_the_remaining_batches(lengths, mode, seq_len, batch_size, kill):
    docs = _docs(lengths)
    options = BlockOptions(seq_len, mode, open_blocks=2)
    work = split_work(epoch_pieces(num_positions(docs.segment_lengths, mode)), 1, batch_size, options).consumers[0]
    whole = list(token_batches(work, docs, options, batch_size, with_provenance=True))
    kill = min(kill, len(whole))
    state = None if kill == 0 else json.loads(json.dumps(whole[kill - 1][1]))
    rest = list(token_batches(work, docs, options, batch_size, state, with_provenance=True))
    assert len(rest) == len(whole) - kill
    for (got, _), (want, _) in zip(rest, whole[kill:], strict=True):
        for key in ("input_ids", "labels", "position_ids", "cu_seqlens", "doc_index", "token_offset"):
            assert torch.equal(got[key], want[key])
