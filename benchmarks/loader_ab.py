"""Interleaved A/B of the loader benchmarks between source trees — how a refactor shows it costs
no speed on a shared machine (issue 30's constraint):

    python -m benchmarks.loader_ab --trees old=/path/to/old/checkout,new=. [--reps 6] [--out FILE]
        [--data DIR --scale 0.05]

Each repeat runs ``benchmarks.mixture_read`` (one dataset and a 4-source mixture, W=0 and W=2)
and ``benchmarks.token_loader`` (concat and pack, W=0 and W=2; LitData and the raw loop in the
same run are the control: identical code in every tree) and, with ``--data`` (a bench-data root
holding shardkit's packed ``tokens`` and ``images`` sets at ``--scale``, from ``benchmarks.pack``),
``benchmarks.read`` over both at W=0 and W=2 — the same packed files for every tree — from each
tree, with that tree on
``PYTHONPATH``, the order of the trees reversed every other repeat. One JSON line per row of
theirs, with ``tree`` and ``rep`` added. Compare trees within a repeat, and the control's spread
across repeats before reading anything into a difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CASES = (
    ["-m", "benchmarks.mixture_read", "--samples", "100000", "--workers", "0", "2", "--reps", "3"],
    ["-m", "benchmarks.token_loader", "--docs", "50000", "--workers", "0"],
    ["-m", "benchmarks.token_loader", "--docs", "50000", "--workers", "2"],
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", required=True, help="name=path,name=path")
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--out", default=None, help="also append the rows to this file")
    parser.add_argument("--data", default=None, help="bench-data root: also run benchmarks.read (see above)")
    parser.add_argument("--scale", default="0.05", help="the packed sets' scale under --data")
    args = parser.parse_args(argv)
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    cases = list(CASES)
    if args.data:
        cases += [["-m", "benchmarks.read", "--peer", "shardkit", "--kind", kind, "--workers", workers,
                   "--scale", args.scale, "--root", os.path.abspath(args.data), "--passes", "3"]
                  for kind in ("tokens", "images") for workers in ("0", "2")]
    out = open(args.out, "a", encoding="utf-8") if args.out else None  # noqa: SIM115
    for rep in range(args.reps):
        order = list(trees) if rep % 2 == 0 else list(trees)[::-1]
        for case in cases:
            for name in order:
                path = os.path.abspath(trees[name])
                env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
                done = subprocess.run([sys.executable, *case], cwd=path, env=env, capture_output=True, text=True,
                                      timeout=1800, check=False)
                if done.returncode:
                    print(f"{name}: {' '.join(case)} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                for line in done.stdout.splitlines():
                    if line.startswith("{"):
                        row = {**json.loads(line), "tree": name, "rep": rep}
                        print(json.dumps(row), flush=True)
                        if out is not None:
                            out.write(json.dumps(row) + "\n")
    if out is not None:
        out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
