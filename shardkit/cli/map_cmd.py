"""``shardkit pack IN OUT --map MODULE:FUNCTION``: tokenize (or any map) while packing."""

from __future__ import annotations

import argparse

from shardkit.errors import SourceError
from shardkit.write.map_fn import import_from_cwd, resolve
from shardkit.write.pack import PackOptions

EXIT_USAGE = 2


def map_options(args: argparse.Namespace, options: PackOptions) -> PackOptions:
    """``options`` with the ``--map`` function; a bad reference is a usage error (exit 2).
    MODULE is found in the current folder first, as ``python -m`` finds it."""
    try:
        if args.engine != "local":
            raise SourceError("--map runs with --engine local")
        import_from_cwd()
        resolve(args.map)
    except SourceError as exc:
        exc.exit_code = EXIT_USAGE  # type: ignore[attr-defined]
        raise
    return PackOptions(**{**options.__dict__, "map": args.map})
