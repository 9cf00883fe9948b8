"""File-tree helpers for tests."""

from __future__ import annotations

import os


def read_tree(folder: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, with its bytes (for byte-identity checks)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as fh:
                out[os.path.relpath(os.path.join(root, name), folder)] = fh.read()
    return out
