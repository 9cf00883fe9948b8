"""Audit, token by token, what a (possibly killed and resumed) token-block run trained: now
``shardkit audit AUDIT_DIR --tokens --data PATH`` (shardkit/read/audit_tokens.py). This wrapper
keeps the old command line and module API (``audit(audit_dir, data, epochs)``)::

    python tools/audit_tokens.py AUDIT_DIR --data PATH [--epochs E] [--json]
"""

from __future__ import annotations

import sys

from shardkit.cli import main as shardkit_main
from shardkit.read.audit_tokens import Expected, audit, positions_of  # noqa: F401 - the old module API


def main(argv: list[str] | None = None) -> int:
    return shardkit_main(["audit", "--tokens", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
