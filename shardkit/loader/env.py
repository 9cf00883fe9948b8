"""Settings a training job takes from its environment when the code does not pass them.

Read here, in the loader, when a ``StreamingDataset`` is made — never in ``plan/`` or
``storage/``, whose functions depend only on their arguments. The same variables are the
defaults of ``shardkit cache warm``, so warming a node's cache helps every later job on it
without a code change:

- ``SHARDKIT_CACHE_DIR``: the node-local cache dir (used for remote datasets only); unset:
  ``~/.cache/shardkit``, the default of ``shardkit cache warm`` too; ``off``: no cache (K47).
- ``SHARDKIT_CACHE_LIMIT``: its size limit, e.g. ``500GiB`` (default ``200GiB``).
- ``SHARDKIT_OFFLINE``: which cached manifest may stand in for an unreachable store:
  ``sealed`` (default: one this user downloaded), ``trust-cache``, ``never`` (K48).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from shardkit.units import parse_size

CACHE_DIR_VAR = "SHARDKIT_CACHE_DIR"
CACHE_LIMIT_VAR = "SHARDKIT_CACHE_LIMIT"
OFFLINE_VAR = "SHARDKIT_OFFLINE"
DEFAULT_CACHE_LIMIT = "200GiB"
CACHE_OFF = "off"


def default_cache_dir() -> str:
    """The documented default cache dir, as ``shardkit cache warm`` computes it (cli/cache_cmd.py)."""
    return os.path.join(os.path.expanduser("~"), ".cache", "shardkit")


def cache_settings(cache_dir: str | bool | None, cache_limit: int | str | None,
                   environ: Mapping[str, str] | None = None, *,
                   remote: bool = True) -> tuple[str | None, int]:
    """``(cache_dir, limit in bytes)``: the arguments given (``cache_dir=False``: no cache),
    else the environment's (``$SHARDKIT_CACHE_DIR=off``: no cache), else, for a ``remote``
    dataset, ``default_cache_dir()`` (K47; a local one is never cached, K8), and
    ``DEFAULT_CACHE_LIMIT``. A malformed variable is a ``ValueError`` naming it."""
    env = os.environ if environ is None else environ
    if cache_dir is False:
        cache_dir = None
    elif cache_dir is None or cache_dir is True:
        text = env.get(CACHE_DIR_VAR) or ""
        cache_dir = None if text == CACHE_OFF else text or (default_cache_dir() if remote else None)
    if cache_limit is not None:
        return cache_dir, parse_size(cache_limit)
    text = env.get(CACHE_LIMIT_VAR) or DEFAULT_CACHE_LIMIT
    try:
        return cache_dir, parse_size(text)
    except ValueError as exc:
        raise ValueError(f"${CACHE_LIMIT_VAR}={text!r}: {exc}") from None


def offline_setting(offline: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``offline=`` as given, else ``$SHARDKIT_OFFLINE``, else ``"sealed"`` (K48)."""
    env = os.environ if environ is None else environ
    if offline is not None:
        return offline
    text = env.get(OFFLINE_VAR) or "sealed"
    if text not in ("sealed", "trust-cache", "never"):
        raise ValueError(f"${OFFLINE_VAR}={text!r}: expected sealed, trust-cache or never")
    return text
