"""Documents of one token-block consumer of a mixture (specs/token-blocks.md TB15, TB12).

The epoch order of a token mixture is the mixed sequence of a one-consumer mixture plan, whose
global shards number the sources' shards one after another (specs/mixture.md). Reading a run
of consecutive epoch indices is then the mixture's own consumer reader
(``iter_mixture_consumer``: one shard opener per source, its cache keys and checksums) instead
of one dataset's; everything else — need order, release — is :class:`EpochDocuments`'.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np

from shardkit.errors import FormatError
from shardkit.plan import Plan
from shardkit.read.mixture.config import OpenMixture
from shardkit.read.mixture.stream import iter_mixture_consumer, source_of_indices
from shardkit.read.options import ReadOptions
from shardkit.read.stats import ReadStats
from shardkit.read.stream import WindowSamples
from shardkit.read.tokens.docs import EpochDocuments, sample_of
from shardkit.storage import ShardCache


class MixtureDocuments(EpochDocuments):
    """:class:`EpochDocuments` over a mixture: ``order`` is the one-consumer mixture plan,
    ``sources`` the opened datasets its sources are (plan order)."""

    def __init__(self, opened: OpenMixture, sources: Sequence[int], order: Plan,
                 fields: tuple[str, str | None], needs: list[tuple[int, int]], cache: ShardCache | None = None,
                 stats: ReadStats | None = None, options: ReadOptions = ReadOptions()) -> None:
        super().__init__(opened.datasets[sources[0]], order, fields, needs, cache, stats, options)
        self.opened, self.sources = opened, tuple(sources)
        sizes = [int(opened.datasets[i].manifest.num_samples) for i in self.sources]
        self.bases = np.cumsum([0, *sizes[:-1]], dtype=np.int64)

    def _windows(self, lo: int) -> Generator[WindowSamples, None, None]:
        return iter_mixture_consumer(self.opened, self.order, 0, lo, self.cache,  # type: ignore[return-value]
                                     self.stats, self.options, self.sources)

    def _sample_where(self, d: int) -> str:
        global_index = sample_of(self.order, d)
        at = int(source_of_indices(self.bases, np.array([global_index]))[0])
        source = self.opened.mixture.sources[self.sources[at]]
        return (f"mixture source {source.label!r} ({source.path}): sample {global_index - int(self.bases[at])} "
                f"(document {d}, epoch order)")

    def _lengths_from(self) -> str:
        return "the source's length index, or a scan of its shards"

    def _checked(self, d: int, value: Any) -> np.ndarray:
        try:
            return super()._checked(d, value)
        except FormatError as error:
            global_index = sample_of(self.order, d)
            at = int(source_of_indices(self.bases, np.array([global_index]))[0])
            source = self.opened.mixture.sources[self.sources[at]]
            raise FormatError(f"mixture source {source.label!r} ({source.path}): sample "
                              f"{global_index - int(self.bases[at])}: {error}") from None
