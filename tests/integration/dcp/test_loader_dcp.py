"""``ShardLoader`` is a ``torch.distributed.checkpoint`` Stateful (G5 in docs/guarantees.md, specs/resume-state.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp

import shardkit as sk

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def test_dcp_save_load_resumes_exactly(tmp_path: Path) -> None:
    """R2 through DCP: save {"loader": loader} mid-epoch, load into a fresh loader, continue."""
    with sk.ShardWriter(str(tmp_path / "ds"), shard_size="2KiB", block_size="512B") as writer:
        for i in range(200):
            writer.write({"id": i})
    def fresh() -> sk.ShardLoader:
        return sk.ShardLoader(sk.StreamingDataset(str(tmp_path / "ds"), batch_size=4))

    full = [i for b in fresh() for i in b["id"].tolist()]
    loader = fresh()
    batches = iter(loader)
    head = [i for _ in range(5) for i in next(batches)["id"].tolist()]
    dcp.save({"loader": loader}, checkpoint_id=str(tmp_path / "ckpt"))
    restored = fresh()
    dcp.load({"loader": restored}, checkpoint_id=str(tmp_path / "ckpt"))
    rest = [i for b in restored for i in b["id"].tolist()]
    assert head + rest == full
