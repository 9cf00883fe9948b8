"""Structural checks of a mixture state (specs/mixture.md, MX7): keys, versions, types."""

from __future__ import annotations

import math
from typing import Any

from shardkit.errors import StateError
from shardkit.plan.params import MAX_INT

MIX_STATE_VERSION = 2  # 1 is still written for an epoch without segments, token weights or a remix
MIX_KIND = "shardkit.mixture"
MIX_STATE_KEYS = ("version", "kind", "epoch", "samples_per_epoch", "composition", "sources", "plan")
OPTIONAL_KEYS = ("segments", "unit", "remix")  # version 2
SOURCE_KEYS = ("name", "fingerprint", "num_samples", "weight", "count", "cursor", "consumed")
TOKEN_KEYS = ("num_tokens", "consumed_tokens")  # per source, with unit "tokens" (version 2)
WEIGHTS_KEY = "sample_weights"  # per source with per-sample weights: their fingerprint (version 2, MX17)


def check_state(state: Any) -> None:
    if not isinstance(state, dict) or state.get("kind") != MIX_KIND:
        raise StateError(f"state: expected a mixture state (kind {MIX_KIND!r}), got "
                         f"{state.get('kind') if isinstance(state, dict) else type(state).__name__!r}")
    version: Any = state.get("version")
    if not _is_int(version) or version < 1 or version > MIX_STATE_VERSION:
        raise StateError(f"state.version: expected an int in 1..{MIX_STATE_VERSION} (a newer version needs "
                         f"a newer shardkit), got {version!r}")
    optional = OPTIONAL_KEYS if version >= 2 else ()
    if not set(MIX_STATE_KEYS) <= set(state) <= set(MIX_STATE_KEYS + optional):
        raise StateError(f"state: expected keys {sorted(MIX_STATE_KEYS)} (version 2 may add {list(OPTIONAL_KEYS)}), "
                         f"got {sorted(state)}")
    for key in ("epoch", "samples_per_epoch"):
        if not _is_int(state[key]) or state[key] < 0:
            raise StateError(f"state.{key}: expected an int in 0..2**63-1, got {state[key]!r}")
    _check_segments(state.get("segments", []))
    if "remix" in state:
        remixed = state["remix"]
        if not isinstance(remixed, dict) or sorted(remixed) != ["base", "weights"] or not isinstance(
                remixed["weights"], dict) or not all(_is_weight(w) for w in remixed["weights"].values()):
            raise StateError("state.remix: expected {base: mixture state, weights: {name: number}}")
    sources = state["sources"]
    if not isinstance(sources, list) or not sources:
        raise StateError(f"state.sources: expected a non-empty list, got {type(sources).__name__}")
    keys = SOURCE_KEYS + (TOKEN_KEYS if state.get("unit", "samples") != "samples" else ())
    if version >= 2 and "consumed_tokens" not in keys and any(
            isinstance(entry, dict) and "consumed_tokens" in entry for entry in sources):
        keys += ("consumed_tokens",)  # token blocks over weights in samples count tokens too (MX14)
    for i, entry in enumerate(sources):
        weighted = version >= 2 and isinstance(entry, dict) and WEIGHTS_KEY in entry
        if not isinstance(entry, dict) or sorted(entry) != sorted(keys + ((WEIGHTS_KEY,) if weighted else ())):
            raise StateError(f"state.sources[{i}]: expected keys {sorted(keys)} (version 2 may add {WEIGHTS_KEY!r})")
        if weighted and not isinstance(entry[WEIGHTS_KEY], str):
            raise StateError(f"state.sources[{i}].{WEIGHTS_KEY}: expected a fingerprint str, "
                             f"got {entry[WEIGHTS_KEY]!r}")
        ints = [entry[k] for k in keys if k not in ("name", "fingerprint", "weight")]
        if not all(_is_int(v) and v >= 0 for v in ints) or not isinstance(entry["name"], str) \
                or not _is_weight(entry["weight"]):
            raise StateError(f"state.sources[{i}]: bad types or values outside 0..2**63-1 in {entry}")


def _check_segments(segments: Any) -> None:
    if not isinstance(segments, list) or not all(
            isinstance(g, dict) and sorted(g) == ["first_sample", "weights"] and _is_int(g["first_sample"])
            and isinstance(g["weights"], list) and all(_is_weight(w) for w in g["weights"]) for g in segments):
        raise StateError(f"state.segments: expected a list of {{first_sample: int, weights: [number]}}, "
                         f"got {segments!r}")


def _is_weight(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _is_int(value: Any) -> bool:
    """An int (not a bool) that fits an int64 (R14): plans compute in numpy int64."""
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT - 1 <= value <= MAX_INT
