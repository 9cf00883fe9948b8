"""Per-sample transforms, optionally told which sample they transform (``SampleContext``).

A ``StreamingDataset`` transform is ``transform(sample)`` or ``transform(sample, ctx)``; which
one is decided once, from the signature, when the dataset is built (``takes_context``). ``ctx``
carries the sample's global index (manifest order), the epoch and the seed, so
``ctx.rng()`` = ``sample_rng(seed, epoch, index)`` is the same generator for that sample
whichever rank or worker decodes it, after any resume — one draw shared by every field
(an image and its mask get the same flip).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shardkit.plan import sample_rng
from shardkit.read.column_pieces import as_samples
from shardkit.read.stream import WindowSamples

Transform = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class SampleContext:
    """Which sample a transform sees: ``index`` (global, manifest order; a pad repeats the index
    of the sample it repeats), ``epoch`` and ``seed`` (the dataset's), and ``copy``: which copy
    of the sample this is in a weighted epoch (0 otherwise; specs/sample-weights.md SW8)."""

    index: int
    epoch: int
    seed: int
    copy: int = 0

    def rng(self) -> np.random.Generator:
        """``sample_rng(seed, epoch, index, copy)``: this sample's (copy's) own counter-based generator."""
        return sample_rng(self.seed, self.epoch, self.index, self.copy)


def takes_context(transform: Transform) -> bool:
    """Whether ``transform`` takes ``ctx``: a second positional parameter without a default, or
    one named ``ctx``. Decided once; ``*args`` wrappers count as one-argument transforms."""
    try:
        parameters = list(inspect.signature(transform).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: one argument
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in parameters if p.kind in kinds]
    if len(positional) < 2:
        return False
    second = positional[1]
    return second.default is inspect.Parameter.empty or second.name == "ctx"


def transformed(windows: Iterator[WindowSamples], transform: Transform, with_context: bool,
                epoch: int, seed: int) -> Iterator[WindowSamples]:
    """``windows`` with ``transform`` applied to every sample (with its context if it takes one)."""
    for window in windows:
        samples = as_samples(window.samples)
        if with_context:
            copies = [0] * len(samples) if window.copies is None else window.copies.tolist()
            out = [transform(sample, SampleContext(int(index), epoch, seed, copy))
                   for sample, index, copy in zip(samples, window.indices.tolist(), copies, strict=True)]
        else:
            out = [transform(sample) for sample in samples]
        yield replace(window, samples=out)
        del window, samples, out  # not held while the next window is read (RP10)
