"""Write the golden datasets under tests/golden/v1/ (specs/shard-format.md §9).

Run once per format version, commit the output, never regenerate it: tests read these bytes
forever (tests/golden/test_golden_v1.py). ``python tools/make_golden.py [--out DIR]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def basic_samples() -> list[dict[str, Any]]:
    """Every value type; sample 0 fills a zstd block, sample 1 a raw (incompressible) block."""
    import torch

    return [
        {
            "id": 0,
            "text": "hello shardkit " * 8,
            "flag": True,
            "score": 0.5,
            "none": None,
            "blob": b"\x00\x01\xfe\xff",
            "nested": {"a": [1, "two", None, False], "b": {"c": 3.25}},
            "tokens": np.arange(6, dtype=np.int32),
            "matrix": np.array([[1.5, -2.0, 0.0], [3.0, 4.25, -0.5]], dtype=np.float64),
            "mask": np.array([True, False, True]),
            "zero_d": np.array(7, dtype=np.int32),
            "empty": np.zeros((0, 3), dtype=np.float64),
            "scalar": np.float32(1.5),
            "tensor": torch.tensor([[1, 2], [3, 4]], dtype=torch.int64),
        },
        {
            "id": 1,
            "blob": bytes((i * 167 + 13) % 251 for i in range(240)) + bytes(range(0, 256, 7)),
        },
        {"id": 2, "text": "é", "tokens": np.array([], dtype=np.int32), "score": -1e300},
        {
            "id": 3,
            "nested": {},
            "tokens": np.array([2**31 - 1, -(2**31)], dtype=np.int32),
            "big": 2**64 - 1,
            "neg": -(2**63),
        },
    ]


CASES = {
    # block_size 200: samples 0 and 1 each seal a block; shard_size 600: shard 0 = blocks 0-1.
    "basic": (basic_samples, {"shard_size": 600, "block_size": 200, "metadata": {"case": "basic"}}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "v1"))
    args = parser.parse_args()
    import shardkit as sk

    for case, (make, options) in CASES.items():
        folder = os.path.join(args.out, case)
        with sk.ShardWriter(folder, overwrite=True, **options) as writer:
            for sample in make():
                writer.write(sample)
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
