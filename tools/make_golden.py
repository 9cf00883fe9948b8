"""Write the golden datasets under tests/golden/v1/ (specs/shard-format.md §9).

Run once per case, commit the output, never regenerate it: tests read these bytes forever
(tests/golden/test_golden_v1.py). ``python tools/make_golden.py --case NAME [--out DIR]``.
``basic`` pins format 1.0 (row blocks), ``columns`` format 1.1 (column blocks, §3a).
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


def column_samples() -> list[dict[str, Any]]:
    """Uniform small samples, stored as column blocks: every column kind (int narrowed to u8 and
    i16, float, bool, str, bytes, variable- and fixed-length arrays, 2-D arrays)."""
    samples = []
    for i in range(48):
        samples.append({
            "id": i,
            "label": (i * 7) % 5 - 2,
            "score": i / 8 - 1.0,
            "keep": i % 3 == 0,
            "caption": "ünï " * (i % 4) + str(i),
            "raw": bytes(range(i % 9)),
            "tokens": np.arange(i, i + 1 + i % 6, dtype=np.int32) * 1000,
            "box": np.array([i, -i, 2 * i, 3], dtype=np.int16),
            "grid": np.full((1 + i % 3, 2), i / 4, dtype=np.float32),
        })
    return samples


CASES = {
    # block_size 200: samples 0 and 1 each seal a block; shard_size 600: shard 0 = blocks 0-1.
    "basic": (basic_samples, {"shard_size": 600, "block_size": 200, "metadata": {"case": "basic"}}),
    # block_size 2500: column blocks of ~16 samples (fewer would make the columns larger than
    # the rows, and the block would stay rows); shard_size 5000: two shards.
    "columns": (column_samples, {"shard_size": 5000, "block_size": 2500,
                                 "metadata": {"case": "columns"}}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "v1"))
    parser.add_argument("--case", choices=sorted(CASES), required=True,
                        help="the one case to write (committed cases are never rewritten)")
    args = parser.parse_args()
    import shardkit as sk

    for case in [args.case]:
        make, options = CASES[case]
        folder = os.path.join(args.out, case)
        with sk.ShardWriter(folder, overwrite=True, **options) as writer:
            for sample in make():
                writer.write(sample)
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
