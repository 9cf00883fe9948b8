"""``shardkit pack IN OUT --map MODULE:FUNCTION``: tokenize (or any map) while packing."""

from __future__ import annotations

import argparse

from shardkit.errors import SourceError
from shardkit.write.map import pack as map_pack
from shardkit.write.map import resolve
from shardkit.write.pack import PackOptions, PackSummary

EXIT_USAGE = 2


def pack_with_map(args: argparse.Namespace, options: PackOptions, progress: object) -> PackSummary:
    """Run ``--map`` over the JSONL input ``args.src`` (one record per line)."""
    try:
        if options.fmt not in ("auto", "jsonl") or args.engine != "local":
            raise SourceError("--map takes a JSONL input (--format jsonl) and --engine local")
        resolve(args.map)
    except SourceError as exc:
        exc.exit_code = EXIT_USAGE  # type: ignore[attr-defined]
        raise
    return map_pack(args.map, args.src, args.out, workers=options.workers, options=options, progress=progress)
