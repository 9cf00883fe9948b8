"""Audit what a (possibly killed and resumed) training run trained: now ``shardkit audit``
(shardkit/cli/audit_cmd.py, shardkit/read/audit.py; specs/resume-state.md R15). This wrapper
keeps the old command line and the old module API (``audit``, ``committed_steps``, ...)::

    python tools/audit.py AUDIT_DIR --num-samples N [--epochs E] [--json]
    python tools/audit.py AUDIT_DIR --data DATASET --sample-weights FIELD|W.npy [--samples-per-epoch T]
        [--seed S] [--endpoint-url URL] [--epochs E] [--json]
    python tools/audit.py AUDIT_DIR --data MIX.toml [--seed S] [--no-shuffle] [--epochs E] [--json]
"""

from __future__ import annotations

import sys

from shardkit.cli import main as shardkit_main
from shardkit.read.audit import (  # noqa: F401 - the old module API
    Multiplicities,
    audit,
    mixture_multiplicities,
    weighted_epoch,
    weighted_multiplicities,
)
from shardkit.read.audit_lines import committed_lines, committed_steps, planned_drops  # noqa: F401


def shardkit_args(argv: list[str], command: str = "audit") -> list[str]:
    """``argv`` for ``shardkit audit``: ``--endpoint-url URL`` becomes ``--storage-option endpoint_url=URL``."""
    out = [command]
    args = iter(argv)
    for arg in args:
        if arg == "--endpoint-url":
            out += ["--storage-option", f"endpoint_url={next(args, '')}"]
        elif arg.startswith("--endpoint-url="):
            out += ["--storage-option", f"endpoint_url={arg.split('=', 1)[1]}"]
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    return shardkit_main(shardkit_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
