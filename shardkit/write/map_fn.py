"""The map function of ``pack`` (specs/token-blocks.md TB10): finding it, and what it may return.

- ``fn`` is a module-level callable (workers are spawned, so it must be importable by name) or
  a ``"module:function"`` string (dotted attributes allowed after the colon). The CLI puts the
  current folder first on ``sys.path`` before importing it, as ``python -m`` does
  (``import_from_cwd``), so ``--map mod:fn`` finds ``./mod.py``.
- ``fn(record)`` returns one sample (a ``dict``), a ``list`` or ``tuple`` of samples, or
  ``None`` to skip the record; anything else is an :class:`EncodeError` naming the record.
  An exception in ``fn`` becomes a :class:`SourceError` naming the record.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from shardkit.errors import EncodeError, ShardkitError, SourceError

MapFn = Callable[[Any], Any]
MapRef = MapFn | str


def import_from_cwd() -> None:
    """Put the current folder first on ``sys.path`` (what ``python -m`` does), so a CLI
    ``--map mod:fn`` finds ``./mod.py``; spawned workers inherit ``sys.path``."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def resolve(fn: MapRef) -> MapFn:
    """``"module:function"`` → the callable (a callable is returned as it is)."""
    if callable(fn):
        return fn
    module_name, _, attr = str(fn).partition(":")
    if not module_name or not attr:
        raise SourceError(f"--map {fn!r}: expected MODULE:FUNCTION")
    if module_name.startswith("."):
        raise SourceError(f"--map {fn!r}: a relative module name cannot be imported; name the module "
                          f"as it is imported from the current folder or an installed package "
                          f"(e.g. {module_name.lstrip('.') or 'module'}:{attr})")
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except ModuleNotFoundError as exc:
        raise SourceError(f"--map {fn!r}: cannot import: {exc} (MODULE is imported from the current "
                          f"folder ({os.getcwd()}) or an installed package: is {exc.name}.py there?)") from None
    except (ImportError, AttributeError) as exc:
        raise SourceError(f"--map {fn!r}: cannot import: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the module's own code failed while importing
        raise SourceError(f"--map {fn!r}: importing {module_name} raised {type(exc).__name__}: {exc}") from None
    if not callable(value):
        raise SourceError(f"--map {fn!r}: {type(value).__name__} is not callable")
    return value


def check_importable(fn: MapRef) -> None:
    """Refuse, before any work, a callable that spawned workers cannot import by name."""
    if isinstance(fn, str):
        return
    name = getattr(fn, "__qualname__", "")  # partials and callable objects: pickling decides
    if "<lambda>" in name or "<locals>" in name:
        raise SourceError(f"map function {fn!r}: workers are spawned processes, so the function must be "
                          "defined at the top level of a module (not a lambda or a nested function); "
                          "or pass workers=1")


def apply_map(fn: MapFn, record: Any, origin: str) -> list[dict[str, Any]]:
    """The samples ``fn`` makes of ``record`` (``origin`` names it in errors)."""
    try:
        result = fn(record)
    except ShardkitError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code: name the record, keep the message
        raise SourceError(f"{origin}: the map function raised {type(exc).__name__}: {exc}") from None
    if result is None:
        return []
    samples = list(result) if isinstance(result, list | tuple) else [result]
    for sample in samples:
        if not isinstance(sample, dict):
            raise EncodeError(f"{origin}: the map function returned {type(sample).__name__}; "
                              "expected a dict, a list of dicts or None")
    return samples
