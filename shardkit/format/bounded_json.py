"""JSON written by other tools (peer indexes, JSON values inside peer shards) parsed so that no
input, however hostile, can recurse without limit: nesting deeper than a bound is an error
naming where the text came from, never a ``RecursionError``. Pure: no I/O (callers bound the
size of what they read)."""

from __future__ import annotations

import json
import math
from typing import Any

from shardkit.errors import FormatError
from shardkit.format.limits import MAX_NESTING_DEPTH


def loads_bounded(text: bytes | str, where: str, max_depth: int = MAX_NESTING_DEPTH,
                  finite: bool = False) -> Any:
    """The value of the JSON ``text`` (UTF-8 when bytes; a leading BOM is allowed), nested at
    most ``max_depth`` lists and objects deep (a scalar is depth 0). ``finite``: also refuse
    ``NaN``, ``Infinity`` and numbers that overflow a float (``1e400``), which no shardkit
    writer writes. ``FormatError`` naming ``where`` otherwise."""
    hooks: dict[str, Any] = {"parse_constant": _no_constant, "parse_float": _finite_float} if finite else {}
    try:
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("utf-8-sig")
        value = json.loads(text, **hooks)
    except RecursionError:
        raise FormatError(f"{where}: JSON nested deeper than {max_depth} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(f"{where}: not valid JSON: {exc}") from None
    if json_depth_exceeds(value, max_depth):
        raise FormatError(f"{where}: JSON nested deeper than {max_depth} levels")
    return value


def json_depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether lists and dicts in ``value`` nest more than ``max_depth`` deep (iterative)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        if depth + 1 > max_depth:
            return True
        stack.extend((child, depth + 1) for child in item if isinstance(child, (list, dict)))
    return False


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number shardkit writes")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} does not fit a float")
    return value
