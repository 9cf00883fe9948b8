"""Human sizes and durations: ``"64MiB"`` → 67108864, ``"7d"`` → 604800.0."""

from __future__ import annotations

import re
from fractions import Fraction

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?i?B?)?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
#: The largest size any flag or variable accepts (8 EiB - 1: an int64 of bytes, what a file
#: offset or a numpy index can hold); larger is a ``ValueError``, not an ``OverflowError`` later.
MAX_SIZE = (1 << 63) - 1
_SECONDS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string like ``"64MiB"``, ``"1.5GB"``, ``"512k"``.

    ``KiB``/``MiB``/… are powers of 1024; ``KB``/``MB``/… and bare ``K``/``M`` powers of 1000
    (bare ``k``… is lenient: also 1024 when written with ``i``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"size must be non-negative, got {value}")
        return _bounded(value, value)
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"not a size: {value!r} (examples: 65536, '64MiB', '1.5GB')")
    digits, unit = match.group(1), (match.group(2) or "").upper()
    whole, _, fraction = digits.partition(".")
    if len(whole.lstrip("0")) > 30:  # far beyond MAX_SIZE in any unit: never made a number
        raise _too_large(value)
    if len(fraction) > 100:
        raise ValueError(f"not a size: {_shown(value)} has more than 100 decimals")
    prefix = unit[:1] if unit[:1] in "KMGTP" and unit else ""
    base = 1024 if "I" in unit else 1000
    return _bounded(int(Fraction(digits) * base ** _POWERS[prefix]), value)  # exact, no float


def _bounded(num_bytes: int, given: object) -> int:
    if num_bytes > MAX_SIZE:
        raise _too_large(given)
    return num_bytes


def _too_large(given: object) -> ValueError:
    return ValueError(f"size {_shown(given)} is too large (at most {MAX_SIZE} bytes, 8 EiB)")


def _shown(given: object) -> str:
    if isinstance(given, int):
        return str(given) if given.bit_length() < 160 else f"(an integer of {given.bit_length()} bits)"
    text = repr(given)
    return text if len(text) <= 48 else f"{text[:20]}… ({len(text) - 2} characters)"


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
