"""JSON-lines output shared by the stand-alone benchmark modules (no third-party imports)."""

from __future__ import annotations

import json
from typing import Any


def save_rows(rows: list[dict[str, Any]], out: str | None) -> None:
    """Print ``rows`` as JSON lines and, with ``out``, write them to that file too."""
    for row in rows:
        print(json.dumps(row), flush=True)
    if out:
        with open(out, "w") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in rows)
