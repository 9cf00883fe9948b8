"""The command line every trainer job script of tests/integration/trainers/ shares.

Kept free of pytest: the scripts import it inside the job's processes."""

from __future__ import annotations

import argparse


def job_parser(description: str) -> argparse.ArgumentParser:
    """``--data --audit-dir --run-number`` (required) and the loop's shape; a script adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True)
    parser.add_argument("--audit-dir", required=True)
    parser.add_argument("--run-number", type=int, required=True, help="launch number, for the audit files")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--step-sleep", type=float, default=0.02)
    return parser
