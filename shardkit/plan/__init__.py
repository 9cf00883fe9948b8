"""Pure partition maths: epoch shuffle, equal-step partition, resume state (G2-G4 in docs/guarantees.md, G6).

Never reads environment variables, torch globals or files; imports only the standard library,
numpy and :mod:`shardkit.errors`. Specs: specs/partition.md, specs/resume-state.md.
"""

from shardkit.plan.epoch_yield import YieldProblem, check_epoch_yield
from shardkit.plan.params import PlanParams
from shardkit.plan.plan import Plan, shard_order
from shardkit.plan.quality import ShuffleStats, shuffle_stats
from shardkit.plan.rng import sample_rng
from shardkit.plan.rotation import worker_consumer
from shardkit.plan.spans import Span, Window, global_index, shard_offsets
from shardkit.plan.state import (
    STATE_VERSION,
    build_plan,
    plan_to_state,
    state_epoch,
    validate_state,
)

__all__ = [
    "STATE_VERSION",
    "Plan",
    "PlanParams",
    "ShuffleStats",
    "Span",
    "Window",
    "YieldProblem",
    "build_plan",
    "check_epoch_yield",
    "global_index",
    "plan_to_state",
    "sample_rng",
    "shard_offsets",
    "shard_order",
    "shuffle_stats",
    "state_epoch",
    "validate_state",
    "worker_consumer",
]
