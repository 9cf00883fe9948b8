"""Hostile edits of a saved loader state, for properties that a tampered state is refused with
``StateError`` (or still loads): every path of the state's JSON tree, each replaced by an
out-of-range, wrongly typed or oversized value, deleted, or given an extra key."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

Path = tuple[Any, ...]

#: Values a tampered state may hold where shardkit wrote something else.
HOSTILE: list[Any] = [
    None, True, -1, 0, 1, 3, 2**31, 2**32 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64 + 1, 10**20, 1.5,
    float("nan"), "x", "", [], [0], [[0, 0, 1]], [[[0, 0, 10**20]]], {}, {"a": 1}, [None] * 3,
]


def paths(tree: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every path into ``tree`` (dict keys and list indices), the root excluded."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from paths(value, (*prefix, key))


def mutated(state: dict[str, Any], path: Path, action: str, value: Any) -> dict[str, Any]:
    """A copy of ``state`` with ``path`` set to ``value``, deleted, or (for an object) given an
    extra key ``"extra"``."""
    out = copy.deepcopy(state)
    *parents, key = path
    target: Any = out
    for part in parents:
        target = target[part]
    if action == "delete":
        del target[key]
    elif action == "extra" and isinstance(target[key], dict):
        target[key]["extra"] = value
    else:
        target[key] = value
    return out


def mutations(state: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Tampered copies of ``state``: one or two edits each."""
    one = st.builds(lambda p, a, v: (p, a, v), st.sampled_from(sorted(paths(state), key=repr)),
                    st.sampled_from(["set", "set", "set", "delete", "extra"]), st.sampled_from(HOSTILE))

    def apply(edits: list[tuple[Path, str, Any]]) -> dict[str, Any]:
        out = state
        for path, action, value in edits:
            try:
                out = mutated(out, path, action, value)
            except (KeyError, IndexError, TypeError):
                pass  # the path went away with an earlier edit
        return out

    return st.lists(one, min_size=1, max_size=2).map(apply)
