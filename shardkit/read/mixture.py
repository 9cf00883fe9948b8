"""A mixture of datasets: the user's description (``Source``, ``Mixture``), its JSON/TOML file,
and the opened sources with the pure plan description they give (specs/mixture.md).

A mixture file (``.toml`` or ``.json``, the same keys)::

    samples_per_epoch = 100000          # default: the sources' samples summed
    composition = "stratified"          # or "random" (default)

    [[sources]]
    path = "s3://bucket/web"            # relative paths: from the file's folder
    weight = 0.7
    name = "web"                        # default: the path's last component

    [[schedule]]                        # optional: weights from an epoch on (MX6)
    first_epoch = 3
    weights = { web = 0.5 }             # sources not named keep weight 0
"""

from __future__ import annotations

import json
import os
import posixpath
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.mixture import COMPOSITIONS, MixSource, MixSpec, ScheduleStep
from shardkit.read.dataset import StoredDataset, open_dataset, split_manifest_path

_TOP_KEYS = {"samples_per_epoch", "composition", "sources", "schedule"}
_SOURCE_KEYS = {"path", "weight", "name"}


@dataclass(frozen=True)
class Source:
    """One dataset of a mixture; ``name`` (default: the path's last component) must be unique
    and stable - resume states find sources by it."""

    path: str
    weight: float = 1.0
    name: str | None = None

    @property
    def label(self) -> str:
        return self.name or posixpath.basename(split_manifest_path(self.path).rstrip("/")) or self.path


@dataclass(frozen=True)
class Mixture:
    """Sources, the size of every epoch (default: their samples summed), the batch composition
    (``random`` or ``stratified``) and an optional weight schedule ``{first_epoch: {name: w}}``."""

    sources: Sequence[Source]
    samples_per_epoch: int | None = None
    composition: str = "random"
    schedule: dict[int, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        if self.composition not in COMPOSITIONS:
            raise PlanError(f"mixture composition: expected one of {COMPOSITIONS}, got {self.composition!r}")
        labels = [source.label for source in self.sources]
        if len(set(labels)) != len(labels):
            raise PlanError(f"mixture: source names must be unique (set name=...), got {labels}")
        unknown = sorted({n for weights in self.schedule.values() for n in weights} - set(labels))
        if unknown:
            raise PlanError(f"mixture schedule: unknown sources {unknown} (sources: {labels})")


@dataclass
class OpenMixture:
    """A mixture with its datasets opened (manifests read) and its plan description."""

    mixture: Mixture
    datasets: tuple[StoredDataset, ...]

    def spec(self) -> MixSpec:
        sources = tuple(
            MixSource(s.label, np.asarray(ds.manifest.shard_sizes, dtype=np.int64), s.weight, ds.manifest.fingerprint)
            for s, ds in zip(self.mixture.sources, self.datasets, strict=True))
        total = sum(source.num_samples for source in sources)
        size = total if self.mixture.samples_per_epoch is None else self.mixture.samples_per_epoch
        labels = [source.name for source in sources]
        schedule = tuple(ScheduleStep(int(epoch), tuple(float(w.get(n, 0.0)) for n in labels))
                         for epoch, w in self.mixture.schedule.items())
        return MixSpec(sources, size, self.mixture.composition, schedule)


def open_mixture(mixture: Mixture, storage_options: dict[str, Any] | None = None) -> OpenMixture:
    """Open every source's manifest (errors name the source)."""
    datasets = []
    for source in mixture.sources:
        try:
            datasets.append(open_dataset(source.path, storage_options))
        except Exception as exc:
            exc.add_note(f"while opening mixture source {source.label!r} ({source.path})")
            raise
    return OpenMixture(mixture, tuple(datasets))


def is_mixture_file(path: str) -> bool:
    return path.endswith((".toml", ".json")) and not path.endswith("manifest.json") and os.path.isfile(path)


def load_mixture(path: str) -> Mixture:
    """Read a mixture file (``.toml`` or ``.json``); errors name the file and the key."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        data = tomllib.loads(raw.decode()) if path.endswith(".toml") else json.loads(raw)
    except (OSError, ValueError) as exc:
        raise PlanError(f"{path}: cannot read the mixture file: {exc}") from None
    return mixture_from_dict(data, path)


def mixture_from_dict(data: Any, where: str) -> Mixture:
    if not isinstance(data, dict) or set(data) - _TOP_KEYS or "sources" not in data:
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise PlanError(f"{where}: expected keys {sorted(_TOP_KEYS)} with 'sources' required, got {keys}")
    folder = os.path.dirname(os.path.abspath(where))
    entries = _list(data, "sources", where)
    sources = [_source(entry, folder, f"{where}: sources[{i}]") for i, entry in enumerate(entries)]
    schedule: dict[int, dict[str, float]] = {}
    for i, step in enumerate(_list(data, "schedule", where)):
        if not isinstance(step, dict) or set(step) != {"first_epoch", "weights"} \
                or not isinstance(step["weights"], dict):
            raise PlanError(f"{where}: schedule[{i}]: expected first_epoch and a weights table by source name")
        schedule[int(step["first_epoch"])] = {str(k): float(v) for k, v in step["weights"].items()}
    size = data.get("samples_per_epoch")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
        raise PlanError(f"{where}: samples_per_epoch: expected an int, got {size!r}")
    try:
        return Mixture(sources, size, str(data.get("composition", "random")), schedule)
    except PlanError as exc:
        raise PlanError(f"{where}: {exc}") from None


def _list(data: dict[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise PlanError(f"{where}: {key}: expected a list, got {type(value).__name__}")
    return value


def _source(entry: Any, folder: str, where: str) -> Source:
    if not isinstance(entry, dict) or "path" not in entry or set(entry) - _SOURCE_KEYS:
        raise PlanError(f"{where}: expected keys {sorted(_SOURCE_KEYS)} with 'path' required, got {entry!r}")
    path = str(entry["path"])
    if "://" not in path and not os.path.isabs(path):
        path = os.path.join(folder, path)
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise PlanError(f"{where}: weight: expected a number, got {weight!r}")
    return Source(path, float(weight), entry.get("name"))
