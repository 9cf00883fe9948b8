"""TB23: the per-document lengths a token plan is made from (the length index, M10-M13) are
re-checked against every document as it is read — the documents the work names and the empty
ones next to them — so an index that lies (its manifest checksum updated to match) is a
``CorruptShardError`` naming the shard and the sample, never tokens silently dropped or a label
pointing into the wrong document (issue 32, item 6)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import shardkit as sk
from shardkit.errors import CorruptShardError
from shardkit.format.checksum import xxh64_text
from tests.helpers.token_data import write_token_dataset

LENGTHS = [30, 27, 0, 40, 7, 12, 50, 3, 9, 21, 0, 16]


def lie_about(path: str, sample: int, length: int) -> None:
    """Rewrite the length index so that ``sample`` has ``length`` tokens, and its manifest
    entry's checksum to match (a self-consistent, wrong index)."""
    with open(f"{path}/manifest.json") as fh:
        manifest = json.load(fh)
    entry = manifest["lengths"][0]
    lengths = np.fromfile(f"{path}/{entry['name']}", dtype="<u4")
    lengths[sample] = length
    lengths.tofile(f"{path}/{entry['name']}")
    entry["checksum"] = xxh64_text(lengths.tobytes())
    with open(f"{path}/manifest.json", "w") as fh:
        json.dump(manifest, fh)


def read_all(path: str, mode: str, rank: int = 0, world_size: int = 1) -> int:
    ds = sk.StreamingDataset(path, batch_size=1, tokens=sk.TokenBlocks(8, mode=mode, eos_id=2), tail="pad")
    ds.options = replace(ds.options, rank=rank, world_size=world_size)  # one rank of several, in this process
    return sum(int(b["num_tokens"]) for b in sk.ShardLoader(ds))


@pytest.fixture
def dataset(tmp_path) -> str:
    return write_token_dataset(str(tmp_path / "ds"), LENGTHS, shard_size=400)


@pytest.mark.parametrize("mode", ["concat", "pack"])
def test_an_index_saying_zero_for_a_27_token_document_is_caught(dataset, mode):
    """The issue's case: 0 for sample 1 (27 tokens) dropped its tokens silently."""
    lie_about(dataset, 1, 0)
    with pytest.raises(CorruptShardError, match=r"sample 1 \(shard .*\): field 'tokens' holds 27 tokens, "
                                                r"the plan was made from 0 \(the length index .*lengths-000"):
        read_all(dataset, mode)


@pytest.mark.parametrize("mode", ["concat", "pack"])
@pytest.mark.parametrize("wrong", [0, 1, 10, 60])
def test_a_wrong_length_anywhere_is_caught_by_some_rank(tmp_path_factory, mode, wrong):
    """Whichever document the index lies about, some consumer of two reads it (an empty one is read
    with the documents beside it) and refuses; the honest index reads every token."""
    for sample, true in enumerate(LENGTHS):
        if true == wrong:
            continue
        path = write_token_dataset(str(tmp_path_factory.mktemp("ds") / "ds"), LENGTHS, shard_size=400)
        honest = sum(read_all(path, mode, r, 2) for r in range(2))
        lie_about(path, sample, wrong)
        raised = 0
        for rank in range(2):
            try:
                read_all(path, mode, rank, 2)
            except CorruptShardError as error:
                assert f"holds {true} tokens, the plan was made from {wrong}" in str(error)
                raised += 1
        assert raised >= 1, (sample, wrong, honest)
