"""Token documents are forgotten once no piece ahead and no open block needs them
(read/tokens/docs.py ``EpochDocuments.release``, specs/token-blocks.md TB12): memory follows the
cutter, not the epoch, in concat and pack mode."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.read.tokens.docs import EpochDocuments
from tests.helpers.token_data import write_token_dataset


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=30), mode=st.sampled_from(["concat", "pack"]),
       seq_len=st.integers(2, 16), open_blocks=st.integers(1, 4))
def test_documents_are_held_only_while_a_piece_or_an_open_block_needs_them(tmp_path_factory, monkeypatch,
                                                                            lengths, mode, seq_len, open_blocks):
    """After every release: each loaded document is used by a piece at or after the cursor, or
    sits in an open block; and the epoch still reads (a document released too early is not
    read again: the reader fails on it)."""
    path = write_token_dataset(str(tmp_path_factory.mktemp("ds") / "ds"), lengths, dtype=np.uint16)
    checked = []
    release = EpochDocuments.release

    def observed(self: EpochDocuments, cursor: int, keep) -> None:
        release(self, cursor, keep)
        open_docs = keep()
        stale = [d for d in self.loaded if self.last_use[d] < cursor and d not in open_docs]
        assert not stale, f"documents {stale} held past their last use at piece {cursor}"
        checked.append(len(self.loaded))

    monkeypatch.setattr(EpochDocuments, "release", observed)
    tokens = sk.TokenBlocks(seq_len, mode=mode, eos_id=2, open_blocks=open_blocks)
    ds = sk.StreamingDataset(path, batch_size=1, tokens=tokens, tail="pad", shuffle=False)
    total = sum(int(batch["num_tokens"]) for batch in sk.ShardLoader(ds))
    assert (total > 0) == any(lengths) and (checked or total == 0)
