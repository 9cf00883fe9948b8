"""Resume state of a global-order epoch: one position (specs/partition.md P31; the schema is
in specs/resume-state.md, "Global order").

::

    {"version": 1, "fingerprint": str, "order": "global",
     "params": {...PlanParams of the plan that saved it...},
     "sequence": {...PlanParams that fixed the epoch's sequence (P29)...},
     "position": int}

``position`` is how many samples of the epoch's sequence the training loop has received (every
rank has received its rows of the same global batches, and those are a prefix: P30). A resume
on any topology, with any global batch size, cuts the sequence from there. No parent chain:
``sequence`` and ``position`` are the whole history. Pure; raises :class:`StateError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shardkit.errors import PlanError, StateError
from shardkit.plan.global_order.order import Dealing, GlobalOrderPlan, dataset_sequence, sequence_params, units_below
from shardkit.plan.params import MAX_INT, PlanParams
from shardkit.plan.sequence import SampleSequence
from shardkit.plan.spans import ShardSizes
from shardkit.plan.state import STATE_VERSION, checked_sizes

GLOBAL_STATE_KEYS = ("version", "fingerprint", "order", "params", "sequence", "position")
#: The epoch's sequence from the shard sizes and its params (a mixture passes its mixed sequence).
SequenceOf = Callable[[np.ndarray, PlanParams], SampleSequence]


def build_global_plan(shard_sizes: ShardSizes, params: PlanParams, resume: dict[str, Any] | None = None,
                      group: int = 1, sequence_of: SequenceOf = dataset_sequence) -> GlobalOrderPlan:
    """The global-order plan of ``params.epoch``: from its start, or from a saved state's
    position (P31) on this topology and global batch size, whatever they were when it was saved.
    ``group``: the batches a worker sends as one DataLoader item (P30). The fingerprint is
    checked by :func:`validate_global_state`."""
    sizes = checked_sizes(shard_sizes)
    if resume is None:
        fixed = sequence_params(params)
        return GlobalOrderPlan(sizes, params, sequence_of(sizes, fixed), fixed, 0, group)
    check_global_state_shape(resume)
    fixed = PlanParams.from_dict(resume["sequence"])
    if fixed.epoch != params.epoch:
        raise StateError(f"resume state is for epoch {fixed.epoch}, but the plan asked for epoch "
                         f"{params.epoch}; resume that epoch first, later epochs start fresh")
    sequence = sequence_of(sizes, fixed)
    if resume["position"] > len(sequence):
        raise StateError(f"state.position: expected 0..{len(sequence)} (the epoch's samples), "
                         f"got {resume['position']}")
    return GlobalOrderPlan(sizes, params, sequence, fixed, resume["position"], group)


def global_plan_to_state(plan: GlobalOrderPlan, offsets: Sequence[int], fingerprint: str,
                         rank: int | None = None) -> dict[str, Any]:
    """The state after consumer ``c`` delivered ``offsets[c]`` samples (multiples of
    ``batch_size``, as the loader counts them). Refused unless every rank received the same
    global batches and they are a prefix (in-order delivery, P30). ``rank``: count that rank's
    consumers only (a rank continuing its own unfinished iteration, R10, knows only its own)."""
    if not isinstance(fingerprint, str):
        raise StateError(f"fingerprint: expected a str, got {type(fingerprint).__name__}")
    received = received_global_batches(plan, offsets, rank)
    position = min(plan.start + received * plan.params.global_batch_size, plan.start + plan.num_source_samples)
    return {"version": STATE_VERSION, "fingerprint": fingerprint, "order": "global",
            "params": plan.params.to_dict(), "sequence": plan.sequence_params.to_dict(), "position": position}


def received_global_batches(plan: Dealing, offsets: Sequence[int], rank: int | None = None) -> int:
    """Global batches every rank (or rank ``rank``) received, from per-consumer offsets (P31)."""
    params, batch = plan.params, plan.params.batch_size
    if not isinstance(offsets, list | tuple) or len(offsets) != plan.num_consumers:
        raise StateError(f"offsets: expected {plan.num_consumers} offsets (one per consumer), got {offsets!r}")
    counts = []
    for consumer, offset in enumerate(offsets):
        total = plan.num_samples(consumer)
        if not _is_int(offset) or not 0 <= offset <= total or offset % batch:
            raise StateError(f"offsets[{consumer}]: expected a multiple of batch_size {batch} in "
                             f"0..{total} (consumer {consumer}'s samples), got {offset!r}")
        counts.append(int(offset) // batch)
    workers = params.workers_per_rank
    if rank is not None and not (_is_int(rank) and 0 <= rank < params.world_size):
        raise StateError(f"rank: expected 0 <= rank < {params.world_size}, got {rank!r}")
    ranks = range(params.world_size) if rank is None else [int(rank)]
    per_rank = {r: sum(counts[r * workers:(r + 1) * workers]) for r in ranks}
    if len(set(per_rank.values())) > 1:
        raise StateError(f"global order: the ranks received different numbers of global batches "
                         f"{list(per_rank.values())} (a state is saved at the same step on every rank, L2)")
    for r, received in per_rank.items():
        for worker in range(workers):
            consumer = r * workers + worker
            expected = units_below(received, worker, workers, plan.group)
            if counts[consumer] != expected:
                raise StateError(
                    f"global order: consumer {consumer} (rank {r}, worker {worker}) delivered {counts[consumer]} "
                    f"batches, but {received} global batches received in order hold {expected} of its (P30: "
                    "global order needs in-order delivery, DataLoader(in_order=True))")
    return next(iter(per_rank.values()))


def validate_global_state(state: Any, fingerprint: str) -> None:
    """Refuse a malformed global-order state or one for another dataset (R8's rules)."""
    check_global_state_shape(state)
    if state["fingerprint"] != fingerprint:
        raise StateError(f"state: resume state is for dataset fingerprint {state['fingerprint']!r}, "
                         f"expected {fingerprint!r} (the dataset changed since the state was saved)")


def is_global_state(state: Any) -> bool:
    """Whether a plan state is a global-order one (its ``order`` key)."""
    return isinstance(state, dict) and state.get("order") == "global"


def check_global_state_shape(state: Any) -> None:
    """Keys, types and ranges (R8, R14) before any part of the state is used."""
    if not isinstance(state, dict):
        raise StateError(f"state: expected an object, got {type(state).__name__}")
    if sorted(state) != sorted(GLOBAL_STATE_KEYS):
        raise StateError(f"state: expected keys {sorted(GLOBAL_STATE_KEYS)}, got {sorted(state)}")
    version = state["version"]
    if not _is_int(version) or not 1 <= version <= STATE_VERSION:
        raise StateError(f"state.version: expected an int in 1..{STATE_VERSION}, got {version!r}"
                         + ("; upgrade shardkit" if _is_int(version) and version > STATE_VERSION else ""))
    if not isinstance(state["fingerprint"], str):
        raise StateError(f"state.fingerprint: expected a str, got {state['fingerprint']!r}")
    if state["order"] != "global":
        raise StateError(f"state.order: expected 'global', got {state['order']!r}")
    params, fixed = _params(state, "params"), _params(state, "sequence")
    if params.order != "global" or fixed.order != "global" or fixed.world_size != 1 or fixed.num_workers != 0:
        raise StateError("state.params, state.sequence: expected order 'global', and one process "
                         f"(world_size 1, num_workers 0) for the sequence; got {state['params']!r}, "
                         f"{state['sequence']!r}")
    if params.epoch != fixed.epoch:
        raise StateError(f"state.params.epoch: expected {fixed.epoch} (the sequence's), got {params.epoch}")
    position = state["position"]
    if not _is_int(position) or not 0 <= position <= MAX_INT:
        raise StateError(f"state.position: expected an int in 0..2**63-1, got {position!r}")


def global_state_epoch(state: dict[str, Any]) -> int:
    check_global_state_shape(state)
    return int(state["sequence"]["epoch"])


def _params(state: dict[str, Any], key: str) -> PlanParams:
    try:
        return PlanParams.from_dict(state[key])
    except PlanError as error:
        raise StateError(f"state.{key}: {error}") from error


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
