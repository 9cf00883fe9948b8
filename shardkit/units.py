"""Human sizes and durations: ``"64MiB"`` → 67108864, ``"7d"`` → 604800.0."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?i?B?)?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_SECONDS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string like ``"64MiB"``, ``"1.5GB"``, ``"512k"``.

    ``KiB``/``MiB``/… are powers of 1024; ``KB``/``MB``/… and bare ``K``/``M`` powers of 1000
    (bare ``k``… is lenient: also 1024 when written with ``i``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"size must be non-negative, got {value}")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"not a size: {value!r} (examples: 65536, '64MiB', '1.5GB')")
    number, unit = float(match.group(1)), (match.group(2) or "").upper()
    prefix = unit[:1] if unit[:1] in "KMGTP" and unit else ""
    base = 1024 if "I" in unit else 1000
    return int(number * base ** _POWERS[prefix])


def parse_duration(value: float | int | str) -> float:
    """Seconds from a number or a string like ``"50ms"``, ``"7d"``, ``"2h"``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"not a duration: {value!r} (examples: '50ms', '30s', '7d')")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def format_bytes(num: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(num) < 1024 or unit == "TiB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1024
    return f"{num:.1f} TiB"
