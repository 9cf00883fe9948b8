"""A mixture of datasets: the user's description (``Source``, ``Mixture``), its JSON/TOML file,
and the opened sources with the pure plan description they give (specs/mixture.md).

A mixture file (``.toml`` or ``.json``, the same keys)::

    samples_per_epoch = 100000          # default: the sources' samples summed
    composition = "stratified"          # or "random" (default)
    weight_unit = "tokens"              # or "samples" (default); tokens: shares of tokens (MX13)
    token_field = "tokens"              # the integer-array field whose length is a sample's tokens

    [[sources]]
    path = "s3://bucket/web"            # relative paths: from the file's folder
    weight = 0.7
    name = "web"                        # default: the path's last component
    sample_weights = "quality"          # optional: a numeric field weighting its samples (MX17)

    [[schedule]]                        # optional: weights from an epoch on (MX6)
    first_epoch = 3
    first_sample = 640000               # optional: from that mixed position of the epoch (MX11)
    weights = { web = 0.5 }             # sources not named get weight 0
"""

from __future__ import annotations

import json
import os
import posixpath
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardkit.errors import PlanError
from shardkit.plan.mixture.spec import COMPOSITIONS, UNITS, MixSource, MixSpec, ScheduleStep
from shardkit.plan.params import MAX_INT
from shardkit.plan.sample_weights import SampleWeights
from shardkit.read.dataset import StoredDataset, open_dataset, split_manifest_path
from shardkit.read.field_values import read_numeric_field
from shardkit.read.tokens.lengths import document_lengths

_TOP_KEYS = {"samples_per_epoch", "composition", "sources", "schedule", "weight_unit", "token_field"}
_STEP_KEYS = {"first_epoch", "first_sample", "weights"}
ScheduleKey = int | tuple[int, int]  # an epoch, or (epoch, mixed position in it)
_SOURCE_KEYS = {"path", "weight", "name", "sample_weights"}


@dataclass(frozen=True)
class Source:
    """One dataset of a mixture; ``name`` (default: the path's last component) must be unique
    and stable - resume states find sources by it. ``sample_weights``: a numeric field's name or
    one weight >= 0 per sample (manifest order) weighting the source's own samples: its passes
    become weighted multisets (specs/mixture.md MX17); ``weight`` still sets its share."""

    path: str
    weight: float = 1.0
    name: str | None = None
    # a numeric field's name, or one weight >= 0 per sample (manifest order): weighted passes (MX17)
    sample_weights: str | np.ndarray | Sequence[float] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.sample_weights is not None and not isinstance(self.sample_weights, str | np.ndarray | Sequence):
            raise PlanError(f"mixture source {self.label!r}: sample_weights: expected a field name or one weight "
                            f"per sample, got {type(self.sample_weights).__name__}")

    @property
    def label(self) -> str:
        return self.name or posixpath.basename(split_manifest_path(self.path).rstrip("/")) or self.path


@dataclass(frozen=True)
class Mixture:
    """Sources, the size of every epoch (default: their samples summed), the batch composition
    (``random`` or ``stratified``) and an optional weight schedule ``{key: {name: w}}``: a key
    ``e`` changes the weights from epoch ``e`` on (MX6), a key ``(e, p)`` from mixed position
    ``p`` of epoch ``e`` (MX11; ``p = step x ranks x batch_size`` changes them at that step on
    every rank); a list of ``(key, weights)`` pairs works too. ``weight_unit="tokens"``: the
    weights are shares of tokens, each sample counting the length of its ``token_field`` (MX13)."""

    sources: Sequence[Source]
    samples_per_epoch: int | None = None
    composition: str = "random"
    schedule: Mapping[ScheduleKey, Mapping[str, float]] | Sequence[tuple[ScheduleKey, Mapping[str, float]]] = \
        field(default_factory=dict)
    weight_unit: str = "samples"
    token_field: str = "tokens"
    file: str | None = field(default=None, compare=False)  # the mixture file it was read from (errors name it)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "schedule", _schedule_dict(self.schedule))
        if self.composition not in COMPOSITIONS:
            raise PlanError(f"mixture composition: expected one of {COMPOSITIONS}, got {self.composition!r}")
        if self.weight_unit not in UNITS:
            raise PlanError(f"mixture weight_unit: expected one of {UNITS}, got {self.weight_unit!r}")
        labels = [source.label for source in self.sources]
        if len(set(labels)) != len(labels):
            raise PlanError(f"mixture: source names must be unique (set name=...), got {labels}")
        unknown = sorted({n for weights in self.steps.values() for n in weights} - set(labels))
        if unknown:
            raise PlanError(f"mixture schedule: unknown sources {unknown} (sources: {labels})")

    @property
    def steps(self) -> dict[tuple[int, int], Mapping[str, float]]:
        """The schedule by ``(epoch, mixed position)``."""
        return dict(self.schedule)  # type: ignore[arg-type]  # normalised in __post_init__


def _schedule_dict(schedule: Any) -> dict[tuple[int, int], Mapping[str, float]]:
    pairs = schedule.items() if isinstance(schedule, Mapping) else schedule
    found: dict[tuple[int, int], Mapping[str, float]] = {}
    for key, weights in pairs:
        at = (key, 0) if isinstance(key, int) else tuple(key)
        if len(at) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in at) \
                or not isinstance(weights, Mapping):
            raise PlanError(f"mixture schedule: expected epoch or (epoch, sample) keys and weights by source "
                            f"name, got {key!r}: {weights!r}")
        if at in found:
            raise PlanError(f"mixture schedule: two changes at epoch {at[0]}, sample {at[1]}")
        found[at] = weights
    return found


@dataclass
class OpenMixture:
    """A mixture with its datasets opened (manifests read) and its plan description."""

    mixture: Mixture
    datasets: tuple[StoredDataset, ...]
    lengths: tuple[np.ndarray, ...] | None = None  # per source, its samples' tokens (weights in tokens)
    weights: tuple[SampleWeights | None, ...] | None = None  # per source, its per-sample weights (MX17)

    def __post_init__(self) -> None:
        if self.lengths is None and self.mixture.weight_unit == "tokens":
            self.lengths = tuple(source_lengths(s, ds, self.mixture.token_field)
                                 for s, ds in zip(self.mixture.sources, self.datasets, strict=True))
        if self.weights is None:
            self.weights = tuple(source_weights(s, ds, self.mixture.file)
                                 for s, ds in zip(self.mixture.sources, self.datasets, strict=True))

    def spec(self) -> MixSpec:
        weights = self.weights or (None,) * len(self.datasets)
        tokens = [None] * len(self.datasets) if self.lengths is None else \
            [_token_total(n, w) for n, w in zip(self.lengths, weights, strict=True)]
        sources = tuple(
            MixSource(s.label, np.asarray(ds.manifest.shard_sizes, dtype=np.int64), s.weight,
                      ds.manifest.fingerprint, k, w)
            for s, ds, k, w in zip(self.mixture.sources, self.datasets, tokens, weights, strict=True))
        total = sum(source.num_samples for source in sources)
        size = total if self.mixture.samples_per_epoch is None else self.mixture.samples_per_epoch
        labels = [source.name for source in sources]
        schedule = tuple(ScheduleStep(epoch, tuple(float(w.get(n, 0.0)) for n in labels), sample)
                         for (epoch, sample), w in self.mixture.steps.items())
        return MixSpec(sources, size, self.mixture.composition, schedule, unit=self.mixture.weight_unit)


def _token_total(lengths: np.ndarray, weights: SampleWeights | None) -> int:
    """The token total weights in tokens divide by (MX13): the source's tokens, or for a source
    weighting its own samples (MX17) the tokens of as many elements of its weighted passes — its
    sample count times the weighted mean length ``sum(w·len) / sum(w)``, rounded — so a token
    share asks for the elements whose expected tokens it is."""
    if weights is None:
        return int(lengths.sum())
    w = weights.weights.astype(np.float64)
    total = float(w.sum())
    mean = float(np.dot(w, lengths.astype(np.float64))) / total if total > 0 else 0.0
    return int(round(mean * len(lengths)))


def source_lengths(source: Source, dataset: StoredDataset, field: str) -> np.ndarray:
    """Tokens per sample of ``field`` in ``source`` (errors name the source)."""
    try:
        return document_lengths(dataset, field)
    except Exception as exc:
        exc.add_note(f"while counting the tokens of mixture source {source.label!r} ({source.path})")
        raise


def source_weights(source: Source, dataset: StoredDataset, file: str | None = None) -> SampleWeights | None:
    """``source``'s per-sample weights (a field read once: one pass over the dataset), or None;
    errors name the source (and the mixture file)."""
    if source.sample_weights is None:
        return None
    try:
        values: np.ndarray | Sequence[float]
        if isinstance(source.sample_weights, str):
            where = f"field {source.sample_weights!r} of {dataset.url}"
            values = read_numeric_field(dataset, source.sample_weights)
        else:
            where, values = f"sample_weights of {dataset.url}", source.sample_weights
        return SampleWeights(values, np.asarray(dataset.manifest.shard_sizes, dtype=np.int64), where)
    except Exception as exc:
        exc.add_note(f"while reading the sample weights of mixture source {source.label!r} ({source.path})"
                     + (f" in {file}" if file else ""))
        raise


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
    except RecursionError:  # a parser's own recursion: a file no mixture description looks like
        raise PlanError(f"{path}: cannot read the mixture file: nested too deeply") from None
    return mixture_from_dict(data, path)


def mixture_from_dict(data: Any, where: str) -> Mixture:
    if not isinstance(data, dict) or set(data) - _TOP_KEYS or "sources" not in data:
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise PlanError(f"{where}: expected keys {sorted(_TOP_KEYS)} with 'sources' required, got {keys}")
    folder = os.path.dirname(os.path.abspath(where))
    entries = _list(data, "sources", where)
    sources = [_source(entry, folder, f"{where}: sources[{i}]") for i, entry in enumerate(entries)]
    schedule: list[tuple[ScheduleKey, dict[str, float]]] = []
    for i, step in enumerate(_list(data, "schedule", where)):
        if not isinstance(step, dict) or set(step) - _STEP_KEYS or not {"first_epoch", "weights"} <= set(step) \
                or not isinstance(step["weights"], dict) \
                or not all(_is_int(step.get(k, 0)) for k in ("first_epoch", "first_sample")):
            raise PlanError(f"{where}: schedule[{i}]: expected first_epoch (int), optional first_sample (int) "
                            f"and a weights table by source name, got {step!r}")
        weights = {str(k): _number(v, f"{where}: schedule[{i}].weights.{k}") for k, v in step["weights"].items()}
        schedule.append(((step["first_epoch"], step.get("first_sample", 0)), weights))
    size = data.get("samples_per_epoch")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_INT):
        raise PlanError(f"{where}: samples_per_epoch: expected an int in 0..2**63-1, got {size!r:.40}")
    try:
        return Mixture(sources, size, str(data.get("composition", "random")), schedule,
                       str(data.get("weight_unit", "samples")), str(data.get("token_field", "tokens")), where)
    except PlanError as exc:
        raise PlanError(f"{where}: {exc}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT


def _number(value: Any, where: str) -> float:
    """A weight of the file: an int or float (not a bool, not a string), named when it is not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"{where}: expected a number, got {value!r:.40}")
    try:
        return float(value)
    except OverflowError:
        raise PlanError(f"{where}: expected a finite number, got {value!r:.40}") from None


def _list(data: dict[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise PlanError(f"{where}: {key}: expected a list, got {type(value).__name__}")
    return value


def _source(entry: Any, folder: str, where: str) -> Source:
    if not isinstance(entry, dict) or "path" not in entry or set(entry) - _SOURCE_KEYS:
        raise PlanError(f"{where}: expected keys {sorted(_SOURCE_KEYS)} with 'path' required, got {entry!r}")
    for key in ("path", "name"):
        if key in entry and not isinstance(entry[key], str):
            raise PlanError(f"{where}: {key}: expected a str, got {entry[key]!r:.40}")
    path = entry["path"]
    if "://" not in path and not os.path.isabs(path):
        path = os.path.join(folder, path)
    weight = _number(entry.get("weight", 1.0), f"{where}: weight")
    weights = entry.get("sample_weights")
    if weights is not None and not isinstance(weights, str):
        raise PlanError(f"{where}: sample_weights: expected a numeric field's name (an array goes through "
                        f"sk.Source(..., sample_weights=array)), got {weights!r:.80}")
    return Source(path, weight, entry.get("name"), weights)
