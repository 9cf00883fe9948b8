"""Settings a training job takes from its environment when the code does not pass them.

Read here, in the loader, when a ``StreamingDataset`` is made — never in ``plan/`` or
``storage/``, whose functions depend only on their arguments. The same variables are the
defaults of ``shardkit cache warm``, so warming a node's cache helps every later job on it
without a code change:

- ``SHARDKIT_CACHE_DIR``: the node-local cache dir (used for remote datasets only).
- ``SHARDKIT_CACHE_LIMIT``: its size limit, e.g. ``500GiB`` (default ``200GiB``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from shardkit.units import parse_size

CACHE_DIR_VAR = "SHARDKIT_CACHE_DIR"
CACHE_LIMIT_VAR = "SHARDKIT_CACHE_LIMIT"
DEFAULT_CACHE_LIMIT = "200GiB"


def cache_settings(cache_dir: str | None, cache_limit: int | str | None,
                   environ: Mapping[str, str] | None = None) -> tuple[str | None, int]:
    """``(cache_dir, limit in bytes)``: the arguments given, else the environment's, else no
    cache dir and ``DEFAULT_CACHE_LIMIT``. A malformed variable is a ``ValueError`` naming it."""
    env = os.environ if environ is None else environ
    if cache_dir is None:
        cache_dir = env.get(CACHE_DIR_VAR) or None
    if cache_limit is not None:
        return cache_dir, parse_size(cache_limit)
    text = env.get(CACHE_LIMIT_VAR) or DEFAULT_CACHE_LIMIT
    try:
        return cache_dir, parse_size(text)
    except ValueError as exc:
        raise ValueError(f"${CACHE_LIMIT_VAR}={text!r}: {exc}") from None
