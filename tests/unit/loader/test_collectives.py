"""The loader's collectives (loader/collectives.py): on the CPU for gloo, on the current CUDA
device for an NCCL-only default group (no CPU transport there), on the CPU for a mixed
``cpu:gloo,cuda:nccl`` group. The gloo path runs for real (a one-process group); NCCL needs
GPUs, so only where its tensors go is checked here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from shardkit.loader import collectives


@pytest.fixture
def gloo_group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_gloo_group_gathers_and_reduces_on_the_cpu(gloo_group: None) -> None:
    assert collectives.collective_device() == torch.device("cpu")
    assert collectives.all_gather_ints([3, -1, 2**62]) == [[3, -1, 2**62]]
    assert collectives.all_reduce_int(7, "min") == collectives.all_reduce_int(7, "max") == 7
    gathered = collectives.all_gather_tensor(torch.tensor([1.5, 2.0], dtype=torch.float64))
    assert len(gathered) == 1 and gathered[0].device.type == "cpu" and gathered[0].tolist() == [1.5, 2.0]


@pytest.mark.parametrize(("backend", "device"), [("nccl", "cuda:3"), ("NCCL", "cuda:3"),
                                                 ("cpu:gloo,cuda:nccl", "cpu"), ("gloo", "cpu")])
def test_an_nccl_only_group_takes_cuda_tensors(monkeypatch: pytest.MonkeyPatch, backend: str, device: str) -> None:
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert collectives.collective_device() == torch.device(device)
