"""Small pieces shared by the CLI commands: the one path for usage errors (exit 2), argument
types, JSON output, progress bars.

Usage errors are found where they can be: argument ``type=`` functions below run while argparse
parses, and :class:`Parser` prints any of them as one line and exits 2 without a traceback.
What can only be checked later raises :class:`UsageError` (``main`` prints it, exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from tqdm import tqdm

from shardkit.errors import ShardkitError
from shardkit.format import MANIFEST_NAME, CompressOptions
from shardkit.plan.params import MAX_INT
from shardkit.units import parse_duration, parse_size
from shardkit.write.inputs import shown as _shown  # bytes that are not UTF-8 shown as \xNN

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(ShardkitError, ValueError):
    """A command line that cannot run as given: ``main`` prints it on one line and exits 2."""

    exit_code = EXIT_USAGE


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``shardkit pack: error: argument --level: …``), exit 2.

    Subparsers inherit the class, so every subcommand reports the same way.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def size(text: str) -> int:
    """``--shard-size 64MiB`` → bytes (``shardkit.units.parse_size``)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration(text: str) -> float:
    """``--older-than 7d`` → seconds (``shardkit.units.parse_duration``)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argument type for ints ``>= minimum``."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        if value > MAX_INT:  # plans compute in int64 (specs/resume-state.md R14)
            raise argparse.ArgumentTypeError(f"expected an integer <= 2**63-1, got {len(text)} digits")
        return value

    return parse


def zstd_level(text: str) -> int:
    """A zstd level, in the range the block codec accepts (``CompressOptions``)."""
    value = _integer(text)
    try:
        CompressOptions(level=value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` → ``(key, value)``; the value is parsed as JSON when it parses, else kept
    as a string. Both must be valid UTF-8 (they end up in a JSON manifest or a URL)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    if not _is_utf8(text):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not valid UTF-8")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def existing_path(text: str) -> str:
    """A local file or folder that exists (``pack``'s input)."""
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"{_shown(text)}: no such file or folder")
    return text


def dataset_path(text: str) -> str:
    """A dataset folder or URL, or its ``manifest.json``; not a shard or another file."""
    base = os.path.basename(text.rstrip("/"))
    is_local_file = "://" not in text and os.path.exists(text) and not os.path.isdir(text)
    if base.endswith(".sks") or (is_local_file and base != MANIFEST_NAME):
        kind = "a shard file" if base.endswith(".sks") else "a file"
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is {kind}, not a dataset: pass the dataset folder or its {MANIFEST_NAME}"
        )
    return text


def key_values(pairs: list[tuple[str, Any]] | None) -> dict[str, Any]:
    """Repeated ``KEY=VALUE`` arguments (parsed by :func:`key_value`) as a dict."""
    return dict(pairs or [])


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        action="append",
        type=key_value,
        metavar="KEY=VALUE",
        help="fsspec storage option, repeatable (e.g. endpoint_url=http://127.0.0.1:9000)",
    )


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    return key_values(getattr(args, "storage_option", None))


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {_shown(text)!r}") from None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
