"""Bounds that every writer keeps and every reader enforces, so that no input, however hostile,
can make shardkit allocate without limit or recurse without limit (specs/shard-format.md I12, SV3).
"""

from __future__ import annotations

from shardkit.errors import FormatError

#: I12: the largest raw (decompressed) block a writer makes and a reader accepts by default.
MAX_BLOCK_BYTES = 256 << 20
#: SV3: the deepest nesting of lists and maps in a sample; the sample map itself is level 1.
MAX_NESTING_DEPTH = 100
#: The environment variable that sets a reader's block limit (bytes) when none is passed.
MAX_BLOCK_BYTES_ENV = "SHARDKIT_MAX_BLOCK_BYTES"


def check_block_limit(value: int, what: str = "max_block_bytes") -> int:
    """``value`` if it is a usable block limit (a positive int below 4 GiB, the u32 of I7)."""
    if type(value) is not int or not 0 < value < 1 << 32:
        raise FormatError(f"{what} must be an integer in [1, 4 GiB), got {value!r}")
    return value
