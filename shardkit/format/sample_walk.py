"""Walks over a sample's lists and maps for the encoder and decoders: non-str keys, and nesting
past ``MAX_NESTING_DEPTH`` (specs/shard-format.md SV3). Only containers are visited."""

from __future__ import annotations

from typing import Any

from shardkit.format.limits import MAX_NESTING_DEPTH

_CONTAINERS = (dict, list, tuple)
_PLAIN = frozenset({type(None), bool, int, float, str, bytes})
_DECODED_CONTAINERS = frozenset({dict, list})


def find_bad_key(value: Any, path: str, depth: int = 1, check_keys: bool = True) -> str | None:
    """Where ``value`` (at nesting level ``depth``) first nests deeper than ``MAX_NESTING_DEPTH``
    (SV3) or, with ``check_keys``, has a map key that is not a str (readers decode with
    ``strict_map_key``); None if nowhere.

    Walks only containers; a list of scalars costs one C-level ``set(map(type, …))``."""
    if depth > MAX_NESTING_DEPTH:
        return f"{_short(path)} (nested deeper than {MAX_NESTING_DEPTH} levels of lists and maps, SV3)"
    if isinstance(value, dict):
        for key, item in value.items():
            if check_keys and not isinstance(key, str):
                return f"{_short(path)}[{key!r}] (keys must be str)"
            if isinstance(item, _CONTAINERS):
                found = find_bad_key(item, f"{path}.{key}", depth + 1, check_keys)
                if found:
                    return found
    elif isinstance(value, (list, tuple)) and not _PLAIN.issuperset(map(type, value)):
        for i, item in enumerate(value):
            if isinstance(item, _CONTAINERS):
                found = find_bad_key(item, f"{path}[{i}]", depth + 1, check_keys)
                if found:
                    return found
    return None


def _short(path: str) -> str:
    return path if len(path) <= 120 else f"{path[:60]}…{path[-40:]}"


def too_deep(value: Any, depth: int) -> bool:
    """Whether the container ``value`` at nesting level ``depth`` nests past ``MAX_NESTING_DEPTH``
    (SV3). No paths are built (``_find_bad_key`` names the place once this says yes); a plain
    loop measured faster than C-level itertools or set tests for chat-like samples."""
    if depth > MAX_NESTING_DEPTH:
        return True
    for item in value.values() if isinstance(value, dict) else value:
        if isinstance(item, _CONTAINERS) and too_deep(item, depth + 1):
            return True
    return False


def nesting_problem(sample: dict[str, Any]) -> str | None:
    """SV3 on read: where a decoded sample nests deeper than ``MAX_NESTING_DEPTH``, or None.
    A sample of scalars, strings, bytes and arrays costs one C-level pass over its values."""
    if _DECODED_CONTAINERS.isdisjoint(map(type, sample.values())) or not too_deep(sample, 1):
        return None
    return find_bad_key(sample, "$", 1, False)
