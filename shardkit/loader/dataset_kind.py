"""Which class ``StreamingDataset(path, ...)`` makes (its ``__new__``): sample weights, a mixture
and token blocks each have a subclass, imported here late (each imports loader/dataset.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardkit.read.mixture import Mixture, is_mixture_file

if TYPE_CHECKING:
    from shardkit.loader.dataset import StreamingDataset


def subclass_for(path: Any, kwargs: dict[str, Any]) -> type[StreamingDataset] | None:
    """The subclass ``StreamingDataset(path, **kwargs)`` makes, or None for one dataset.

    ``sample_weights=``: a ``WeightedDataset`` (specs/sample-weights.md; refused for a mixture).
    ``path`` a ``Mixture`` or the path of a mixture file (.toml/.json): a ``MixtureDataset``
    (specs/mixture.md), or with ``tokens=`` a ``TokenMixtureDataset`` (token blocks over a
    mixture, TB15). ``tokens=`` on one dataset: a ``TokenDataset``.
    """
    mixture = isinstance(path, Mixture) or (isinstance(path, str) and is_mixture_file(path))
    tokens = kwargs.get("tokens") is not None
    if "sample_weights" in kwargs:
        from shardkit.loader.weighted_dataset import weighted_class

        return weighted_class(mixture)
    if mixture and tokens:
        from shardkit.loader.token_mixture import TokenMixtureDataset

        return TokenMixtureDataset
    if mixture:
        from shardkit.loader.mixture_dataset import MixtureDataset

        return MixtureDataset
    if tokens:
        from shardkit.loader.token_dataset import TokenDataset

        return TokenDataset
    return None
