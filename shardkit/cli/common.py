"""Small pieces shared by the CLI commands (argument types, JSON output, progress bars)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tqdm import tqdm


def key_values(items: list[str] | None, flag: str) -> dict[str, Any]:
    """``["a=1", "b=x"]`` → ``{"a": 1, "b": "x"}`` (values parsed as JSON when they parse)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"{flag} expects key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="fsspec storage option, repeatable (e.g. endpoint_url=http://127.0.0.1:9000)",
    )


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    return key_values(getattr(args, "storage_option", None), "--storage-option")


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


class Progress:
    """A tqdm bar counting samples, with MB/s of raw bytes in the postfix."""

    def __init__(self, desc: str, total: int | None = None, unit: str = "samples", enabled: bool = True) -> None:
        self._bar = tqdm(total=total, desc=desc, unit=unit, disable=None if enabled else True, dynamic_ncols=True)
        self._bytes = 0

    def update(self, count: int, num_bytes: int = 0) -> None:
        self._bytes += num_bytes
        self._bar.update(count)
        elapsed = self._bar.format_dict.get("elapsed") or 0
        if num_bytes and elapsed:
            self._bar.set_postfix_str(f"{self._bytes / elapsed / 1e6:.1f} MB/s", refresh=False)

    def close(self) -> None:
        self._bar.close()
