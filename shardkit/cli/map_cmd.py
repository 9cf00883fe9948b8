"""``shardkit pack IN OUT --map MODULE:FUNCTION``: tokenize (or any map) while packing."""

from __future__ import annotations

import argparse

from shardkit.errors import SourceError
from shardkit.write.map import map_format, resolve
from shardkit.write.map import pack as map_pack
from shardkit.write.pack import PackOptions, PackSummary

EXIT_USAGE = 2


def pack_with_map(args: argparse.Namespace, options: PackOptions, progress: object) -> PackSummary:
    """Run ``--map`` over the JSONL, text or Parquet input ``args.src`` (``map_format``)."""
    try:
        if args.engine != "local":
            raise SourceError("--map runs with --engine local")
        map_format(args.src, options.fmt)
        resolve(args.map)
    except SourceError as exc:
        exc.exit_code = EXIT_USAGE  # type: ignore[attr-defined]
        raise
    return map_pack(args.map, args.src, args.out, workers=options.workers, options=options, progress=progress)
