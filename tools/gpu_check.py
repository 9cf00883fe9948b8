"""GPU check for a session that has a CUDA device (not run in CI; prints, asserts nothing timed).

1. the DevicePrefetcher tests on CUDA: ``pytest tests/unit/loader`` (they add a cuda case);
2. H2D overlap: time N steps of (matmul on batch k) with batches staged by DevicePrefetcher from a
   pinned ShardLoader, against the same steps with synchronous ``.to(device)``.

    python tools/gpu_check.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import shardkit as sk


def _timed(batches: object, steps: int, weight: torch.Tensor, device: torch.device) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for step, batch in enumerate(batches):  # type: ignore[attr-defined]
        x = batch["x"] if batch["x"].device == device else batch["x"].to(device)
        for _ in range(4):
            x = torch.tanh(x @ weight)
        if step + 1 >= steps:
            break
    torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    tests = subprocess.run([sys.executable, "-m", "pytest", "tests/unit/loader", "-q"], check=False)
    device = torch.device("cuda")
    path = tempfile.mkdtemp()
    with sk.ShardWriter(path, shard_size="64MiB", compression="none") as writer:
        for i in range(4096):
            writer.write({"x": np.full((256, 1024), i % 7, dtype=np.float32)})
    weight = torch.randn(1024, 1024, device=device)
    loader = sk.ShardLoader(sk.StreamingDataset(path, batch_size=16, shuffle=False), num_workers=4, pin_memory=True)
    sync = _timed(loader, 200, weight, device)
    overlapped = _timed(sk.DevicePrefetcher(loader, device), 200, weight, device)
    report = {"tests_rc": tests.returncode, "sync_s": sync, "prefetched_s": overlapped, "speedup": sync / overlapped}
    print(json.dumps(report, indent=2))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh)
    return tests.returncode


if __name__ == "__main__":
    sys.exit(main())
