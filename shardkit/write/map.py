"""``sk.pack(fn, inputs, out, workers=N)``: a user function over input records, in parallel
worker processes, into one dataset (``shardkit pack IN OUT --map MODULE:FUNCTION``).

It is ``pack`` with ``PackOptions.map`` set: the same pipeline (write/pack.py), so every
option applies — the pack-time shuffle, ``workers``, ``skip_bad``, the length index, overwrite
safety. The map contract (what ``fn`` is and returns) is in map_fn.py and specs/token-blocks.md
TB10. ``inputs`` is an iterable of picklable records, or a path that ``pack`` reads: each
record is the sample ``pack`` would write (a JSONL line's object, a Parquet row, a file group
…), and a ``.txt``/``.text`` file gives ``{"text": line}`` per line, newline removed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from shardkit.errors import SourceError
from shardkit.write.map_fn import MapFn, MapRef, resolve
from shardkit.write.pack import PackOptions, PackSummary
from shardkit.write.pack import pack as pack_input

__all__ = ["MapFn", "pack", "resolve"]


def pack(fn: MapRef, inputs: Iterable[Any] | str, out: str, *, workers: int | None = None,
         options: PackOptions | None = None, progress: Any = None) -> PackSummary:
    """Map ``fn`` over ``inputs`` into a dataset at ``out``. ``options``: every pack option
    (default ``PackOptions()``: shuffled with seed 0, as ``shardkit pack``); ``workers``, when
    given, replaces ``options.workers``."""
    options = options or PackOptions()
    workers = options.workers if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SourceError(f"workers must be an int >= 1, got {workers!r}")
    return pack_input(inputs, out, replace(options, map=fn, workers=workers), progress)
