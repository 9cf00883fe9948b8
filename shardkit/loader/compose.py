"""The one place the public keywords of ``StreamingDataset`` become its two components
(specs/partition.md §Components): an epoch source and a batching.

=================================  ==========================  ===================
``StreamingDataset(...)``          epoch source                batching
=================================  ==========================  ===================
``path``                           ``DatasetSource``           ``SampleBatching``
``path, sample_weights=``          weighted ``DatasetSource``  ``SampleBatching``
``Mixture`` or a mixture file      ``MixtureSource``           ``SampleBatching``
any of those, ``tokens=``          (the same)                  ``TokenBatching``
=================================  ==========================  ===================

Every cell of the table works; what a combination cannot mean is refused here, by name:
``sample_weights=`` on a mixture (its sources weigh their own samples, SW10), ``with_source=``
and ``apply_mix=`` outside a mixture, ``transform``/``collate_fn`` with token blocks, and (not
built yet) token blocks in pack mode or ``apply_mix="now"`` in ``order="global"`` (specs/partition.md
P35, specs/token-blocks.md TB34).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardkit.errors import PlanError
from shardkit.loader.dataset_source import DatasetSource
from shardkit.loader.global_tokens import refuse_unsupported
from shardkit.loader.mixture_source import MixtureSource
from shardkit.loader.sample_batching import SampleBatching
from shardkit.loader.token_batching import TokenBatching
from shardkit.loader.transforms import Transform
from shardkit.plan.sample_weights import SampleWeights
from shardkit.plan.tokens.config import TokenBlocks
from shardkit.read import StoredDataset, open_dataset
from shardkit.read.field_values import read_numeric_field
from shardkit.read.mixture.config import Mixture, is_mixture_file, load_mixture, open_mixture
from shardkit.storage import ShardCache

Weights = str | np.ndarray | Sequence[float]


@dataclass(frozen=True)
class Choices:
    """What the keywords of one ``StreamingDataset(...)`` call ask for, beyond the plan params."""

    tokens: TokenBlocks | None = None
    sample_weights: Weights | None = None
    samples_per_epoch: int | None = None
    with_source: bool = False
    apply_mix: str = "next_epoch"
    transform: Transform | None = None
    collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None
    quality_field: str | None = None
    order: str = "shard"


def as_mixture(path: Any) -> Mixture | None:
    """``path`` as a mixture (a ``Mixture``, or the path of a .toml/.json mixture file), else None."""
    if isinstance(path, Mixture):
        return path
    if isinstance(path, str) and is_mixture_file(path):
        return load_mixture(path)
    if not isinstance(path, str):
        raise TypeError(f"StreamingDataset: expected a dataset path or a Mixture, got {type(path).__name__}")
    return None


def check_choices(mixture: Mixture | None, choices: Choices) -> None:
    """Refuse what a combination cannot mean, before anything is opened."""
    if mixture is not None and choices.sample_weights is not None:
        raise TypeError("sample_weights= is not an option of a mixture (SW10): give each source its own, "
                        "sk.Source(path, weight=..., sample_weights='field' | array), or the source's "
                        "sample_weights key in the mixture file (specs/mixture.md MX17)")
    if mixture is None:
        for name, value, default in (("with_source", choices.with_source, False),
                                     ("apply_mix", choices.apply_mix, "next_epoch")):
            if value != default:
                raise TypeError(f"StreamingDataset({name}=...) is an option of a mixture; this is one dataset")
    if choices.samples_per_epoch is not None and choices.sample_weights is None:
        raise TypeError("samples_per_epoch= sizes a weighted epoch: give sample_weights= too (a mixture "
                        "sets its epoch size in the Mixture)")
    if choices.order == "global":  # P35: what global order does not cover yet, refused by name
        if choices.tokens is not None:
            refuse_unsupported(choices.tokens)  # TB34: concat only
        if choices.apply_mix != "next_epoch":
            raise ValueError("StreamingDataset(order='global', apply_mix='now'): re-mixing the rest of a started "
                             "epoch is not supported in global order yet; new weights take effect at the next epoch")
    if choices.tokens is not None:
        for name in ("transform", "collate_fn"):
            if getattr(choices, name):
                raise TypeError(f"StreamingDataset(tokens=...): {name} does not apply to token blocks")


def epoch_source(path: str, mixture: Mixture | None, choices: Choices, storage_options: dict[str, Any] | None,
                 manifest_cache: ShardCache | None, offline: str) -> DatasetSource | MixtureSource:
    """The epoch source the keywords name (opens the dataset or every source of the mixture)."""
    if mixture is not None:
        return MixtureSource(mixture, open_mixture(mixture, storage_options), choices.with_source, choices.apply_mix)
    total = choices.samples_per_epoch  # checked before the dataset is opened and its weights read
    if total is not None and (isinstance(total, bool) or not isinstance(total, int | np.integer) or total < 0):
        raise PlanError(f"samples_per_epoch: expected an int >= 0, got {total!r}")
    dataset = open_dataset(path, storage_options, manifest_cache, offline)
    weights = None if choices.sample_weights is None else _weights(dataset, choices.sample_weights)
    return DatasetSource(dataset, weights, None if total is None else int(total), choices.quality_field)


def batching(choices: Choices, where: str) -> SampleBatching | TokenBatching:
    if choices.tokens is not None:
        return TokenBatching(choices.tokens, where)
    return SampleBatching(choices.transform, choices.collate_fn)


def _weights(dataset: StoredDataset, sample_weights: Weights) -> SampleWeights:
    """``sample_weights`` (a numeric field's name, read once: one pass, or one weight per sample)."""
    if isinstance(sample_weights, str):
        where = f"field {sample_weights!r} of {dataset.url}"
        values: Any = read_numeric_field(dataset, sample_weights)
    else:
        where, values = f"sample_weights of {dataset.url}", sample_weights
    return SampleWeights(values, dataset.manifest.shard_sizes, where)
