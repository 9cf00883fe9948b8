"""TB22: a ``TokenBlocks`` config outside what a batch can hold is refused at construction."""

from __future__ import annotations

import pytest

import shardkit as sk
from shardkit.errors import PlanError


@pytest.mark.parametrize("key", ["eos_id", "bos_id", "pad_id", "ignore_index"])
@pytest.mark.parametrize("value", [2**63, 2**70, -(2**63) - 1])
def test_token_ids_beyond_int64_are_refused(key: str, value: int) -> None:
    """TB22: ``TokenBlocks(eos_id=2**70)`` was accepted and the first batch died (OverflowError)."""
    with pytest.raises(PlanError, match=key):
        sk.TokenBlocks(8, **{key: value})


@pytest.mark.parametrize(("key", "value"), [("seq_len", 2**31), ("seq_len", 10**20), ("open_blocks", 4097)])
def test_seq_len_and_open_blocks_are_capped(key: str, value: int) -> None:
    with pytest.raises(PlanError, match=key):
        sk.TokenBlocks(**{"seq_len": 8, key: value})


def test_int64_extremes_are_accepted() -> None:
    assert sk.TokenBlocks(2**31 - 1, eos_id=2**63 - 1, bos_id=0, pad_id=-(2**63)).eos_id == 2**63 - 1
