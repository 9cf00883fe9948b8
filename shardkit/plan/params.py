"""Plan parameters: everything besides shard sizes that a partition depends on (G2 in docs/guarantees.md).

A :class:`PlanParams` is validated on construction and is immutable, so a plan built from it can
be shared between threads. ``to_dict``/``from_dict`` are the resume-state encoding
(specs/resume-state.md, field ``params``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from shardkit.errors import PlanError
from shardkit.units import MAX_SIZE

TAILS = ("drop", "pad")
#: ``shard``: each consumer reads its own equal-step range (P1-P21, the default); ``global``: the
#: sequence of global batches is the same on every topology, each rank takes its rows (P27-P34).
ORDERS = ("shard", "global")

_INT_MINIMUMS = {
    "seed": 0,
    "epoch": 0,
    "world_size": 1,
    "num_workers": 0,
    "batch_size": 1,
    "shuffle_window": 1,
    "interleave": 1,
    "spread": 1,
}
# Fields added after version 1 of the resume state: omitted from to_dict at their default, so
# states saved before them (and plans that do not use them) are unchanged.
_OPTIONAL_DEFAULTS: dict[str, Any] = {"interleave": 1, "spread": 1, "order": "shard"}
# What the loader and ``shardkit plan`` use when the caller says nothing (specs/partition.md P18):
# each shard is split among about 12 consumers, so a window mixes up to 12x as many shards
# (the smallest that gives a sorted 1,000-class set of 100k samples >= 132 classes per batch of 256 at 8x4).
DEFAULT_SPREAD = 12
#: Every int parameter fits an int64 (plans compute in numpy int64; specs/resume-state.md R14).
MAX_INT = MAX_SIZE  # the one int64 ceiling (units.py)
#: At most this many consumers (``world_size * max(num_workers, 1)``): a plan holds a few arrays
#: of one entry per consumer, and a state from elsewhere must not ask for more (R14).
MAX_CONSUMERS = 2**20


def default_spread(order: dict[str, Any] | None) -> int:
    """The loader's ``spread`` when the user gives none (P19): ``DEFAULT_SPREAD`` for a dataset
    not shuffled at pack time (its manifest's ``order``, M9, says so or says nothing), 1 for one
    that was: a pack-shuffled dataset is already mixed, and spreading would only cost reads."""
    return 1 if order is not None and order.get("shuffled") is True else DEFAULT_SPREAD


@dataclass(frozen=True)
class PlanParams:
    """The knobs of one epoch's plan.

    ``num_workers=0`` means one consumer per rank (the training process reads itself); the
    number of consumers is ``world_size * max(num_workers, 1)``.
    """

    seed: int = 0
    epoch: int = 0
    world_size: int = 1
    num_workers: int = 0
    batch_size: int = 1
    tail: str = "drop"
    shuffle: bool = True
    shuffle_window: int = 8192
    interleave: int = 1  # lanes a consumer reads at once when shuffling (specs/partition.md P13)
    spread: int = 1  # consumers a shard is split among when shuffling (P18); users get DEFAULT_SPREAD
    order: str = "shard"  # "global": topology-invariant global batches (P27), plan/global_order/order.py

    def __post_init__(self) -> None:
        for name, minimum in _INT_MINIMUMS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlanError(f"plan parameter {name}: expected an int, got {value!r}")
            if not minimum <= value <= MAX_INT:
                raise PlanError(f"plan parameter {name}: expected {minimum}..2**63-1, got {value}")
        if self.num_consumers > MAX_CONSUMERS:
            raise PlanError(f"plan parameters world_size {self.world_size} x num_workers {self.num_workers}: "
                            f"{self.num_consumers} consumers, at most {MAX_CONSUMERS} are supported")
        if self.tail not in TAILS:
            raise PlanError(f"plan parameter tail: expected one of {TAILS}, got {self.tail!r}")
        if self.order not in ORDERS:
            raise PlanError(f"plan parameter order: expected one of {ORDERS}, got {self.order!r}")
        if not isinstance(self.shuffle, bool):
            raise PlanError(f"plan parameter shuffle: expected a bool, got {self.shuffle!r}")

    @property
    def workers_per_rank(self) -> int:
        """Consumers per rank: ``max(num_workers, 1)``."""
        return max(self.num_workers, 1)

    @property
    def num_consumers(self) -> int:
        """Global consumers ``C = world_size * max(num_workers, 1)``."""
        return self.world_size * self.workers_per_rank

    @property
    def global_batch_size(self) -> int:
        """Samples of one step over all ranks: ``world_size * batch_size`` (P27)."""
        return self.world_size * self.batch_size

    def consumer_id(self, rank: int, worker: int) -> int:
        """Global consumer id ``rank * max(num_workers, 1) + worker``."""
        if not 0 <= rank < self.world_size:
            raise PlanError(f"rank: expected 0 <= rank < {self.world_size}, got {rank}")
        if not 0 <= worker < self.workers_per_rank:
            raise PlanError(f"worker: expected 0 <= worker < {self.workers_per_rank}, got {worker}")
        return rank * self.workers_per_rank + worker

    def same_partition(self, other: PlanParams) -> bool:
        """True when both produce the same plan for the same shards (``num_workers`` 0 == 1)."""
        return self.to_dict() | {"num_workers": self.workers_per_rank} == other.to_dict() | {
            "num_workers": other.workers_per_rank
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (the ``params`` object of a resume state): every field, except
        fields added later while they hold their default."""
        data = asdict(self)
        for name, default in _OPTIONAL_DEFAULTS.items():
            if data[name] == default:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> PlanParams:
        """Inverse of :meth:`to_dict`; unknown or missing keys raise :class:`PlanError`."""
        if not isinstance(data, dict):
            raise PlanError(f"plan params: expected an object, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        missing = sorted(names - set(data) - set(_OPTIONAL_DEFAULTS))
        if unknown or missing:
            raise PlanError(f"plan params: unknown keys {unknown}, missing keys {missing}")
        return cls(**data)
