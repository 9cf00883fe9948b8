"""The loader state of a ``ShardLoader`` as one typed, frozen object (G5, G6 in
docs/guarantees.md; specs/resume-state.md §Loader)::

    {"version": 2, "kind": "shardkit.loader", "epoch": int, "steps": int,
     "plan": <plan state: fingerprint, params, offsets per consumer, parent; or, in global
              order, fingerprint, params, sequence, position (R16)>,
     <the parts of the dataset's components: "sample_weights", "mixture", "tokens">,
     "audit_step": int (with an audit sink, R15),
     "next": what each consumer's next batch holds (version 2, R18; loader/resume_check.py)}

``LoaderState.from_dict`` checks the shape once (L5, R14: every level of the plan, before any
part is read); each component then checks its own part (``EpochSource.load_part``,
``Batching.load_part``), and a part no component reads is refused by name
(``StreamingDataset.load_state_part``). ``to_dict`` is what ``state_dict()`` returns: JSON
types only, the same keys a state of earlier versions of this package had (plus ``next`` since
version 2), so saved states load: a version-1 state is one without ``next`` (R23).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shardkit.errors import StateError
from shardkit.loader.audit_sink import AUDIT_STEP_KEY
from shardkit.plan.any_state import check_any_state_shape, validate_any_state
from shardkit.plan.params import MAX_INT

LOADER_STATE_VERSION = 2  # 2: the optional "next" digest (R18); 1 reads as 2 without it (R23)
LOADER_STATE_KIND = "shardkit.loader"
NEXT_KEY = "next"
BASE_KEYS = frozenset({"version", "kind", "epoch", "steps", "plan", AUDIT_STEP_KEY, NEXT_KEY})


@dataclass(frozen=True)
class LoaderState:
    """A loader state: the epoch, the steps of it this rank took, the plan state at the
    consumed boundary, and the components' parts (by key). Its dicts are the state's own (JSON
    values): read them, never change them."""

    epoch: int
    steps: int
    plan: dict[str, Any]
    parts: dict[str, Any] = field(default_factory=dict)
    audit_step: int | None = None
    version: int = LOADER_STATE_VERSION
    next: dict[str, Any] | None = None  # the consumers' next heads (R18), None in a version-1 state

    @classmethod
    def from_dict(cls, state: Any) -> LoaderState:
        """Refuse malformed, newer or foreign states with a clear ``StateError`` (L5)."""
        check_loader_state(state, None)
        audit = state.get(AUDIT_STEP_KEY)
        parts = {key: value for key, value in state.items() if key not in BASE_KEYS}
        return cls(int(state["epoch"]), int(state.get("steps", 0)), dict(state["plan"]), parts, audit,
                   int(state["version"]), state.get(NEXT_KEY))

    def part(self, key: str) -> Any:
        """A component's part, or None when the state has none."""
        return self.parts.get(key)

    def to_dict(self) -> dict[str, Any]:
        audit = {} if self.audit_step is None else {AUDIT_STEP_KEY: self.audit_step}
        digest = {} if self.next is None else {NEXT_KEY: self.next}
        return {"version": self.version, "kind": LOADER_STATE_KIND, "epoch": self.epoch, "steps": self.steps,
                "plan": self.plan, **self.parts, **audit, **digest}


def check_loader_state(state: Any, fingerprint: str | None) -> None:
    """Refuse malformed, newer or foreign states with a clear ``StateError`` (G6); ``None``:
    check the shape only."""
    if not isinstance(state, Mapping) or state.get("kind") != LOADER_STATE_KIND:
        raise StateError("not a shardkit loader state (missing kind='shardkit.loader')")
    version = state.get("version")
    if not isinstance(version, int) or version > LOADER_STATE_VERSION:
        raise StateError(f"loader state version {version!r}; this shardkit reads <= {LOADER_STATE_VERSION}")
    if not isinstance(state.get("epoch"), int) or not isinstance(state.get("plan"), Mapping):
        raise StateError("loader state needs an int 'epoch' and a 'plan' object")
    steps = state.get("steps", 0)
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= MAX_INT:
        raise StateError(f"loader state: 'steps' must be an int in 0..2**63-1, got {steps!r:.40}")
    check_any_state_shape(state["plan"])  # every level's types, ranges and caps, before any part is read (R14)
    params = state["plan"]["params"]  # a global-order state's params share its sequence's epoch (R16)
    if fingerprint is not None:
        validate_any_state(state["plan"], fingerprint)  # also refuses a malformed plan
    if params.get("epoch") != state["epoch"]:
        raise StateError("loader state: 'epoch' and plan params disagree")
