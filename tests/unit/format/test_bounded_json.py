"""JSON from other tools parsed with a nesting bound (``shardkit.format.bounded_json``,
specs/pack-inputs.md PI12): the bound is exact, and nesting far past Python's recursion limit
is the same ``FormatError``, never a ``RecursionError``."""

from __future__ import annotations

import pytest

from shardkit.errors import FormatError
from shardkit.format.bounded_json import loads_bounded


def nested(depth: int) -> str:
    """``depth`` levels, objects and lists in turn, around a 0."""
    opens = ('{"a": ' if level % 2 else "[" for level in range(depth))
    closes = ("}" if level % 2 else "]" for level in reversed(range(depth)))
    return "".join(opens) + "0" + "".join(closes)


@pytest.mark.parametrize("depth", [0, 1, 2, 99, 100])
def test_nesting_up_to_the_bound_parses(depth):
    assert loads_bounded(nested(depth).encode(), "x.json", 100) is not None


@pytest.mark.parametrize("depth", [101, 150, 5_000, 1_000_000])
def test_nesting_past_the_bound_is_a_format_error_naming_the_file(depth):
    with pytest.raises(FormatError, match=r"^x\.json: JSON nested deeper than 100 levels$"):
        loads_bounded(nested(depth), "x.json", 100)


def test_text_that_is_not_json_or_not_utf8_names_the_file():
    assert loads_bounded(b"\xef\xbb\xbf[1]", "x.json") == [1]  # a BOM is allowed
    for bad in (b"[1", b"\xff[]", "nan-ish"):
        with pytest.raises(FormatError, match=r"^x\.json: not valid JSON"):
            loads_bounded(bad, "x.json")
