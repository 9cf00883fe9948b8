"""The ``shardkit`` command line. Never imports torch at module level (bench/plan import lazily).

Exit codes: 0 ok; 1 the command ran and found a problem (verification failed, bad input while
packing); 2 usage error or an unreadable dataset/manifest.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from shardkit import __version__
from shardkit.cli import dataset_cmds, pack_cmd
from shardkit.errors import ShardkitError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shardkit",
        description="Pack, verify, inspect and stream sharded training datasets.",
    )
    parser.add_argument("--version", action="version", version=f"shardkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pack_cmd.add_parser(sub)
    dataset_cmds.add_parsers(sub)
    for optional in ("plan_cmd", "bench_cmd", "cache_cmd"):
        module = _optional_module(optional)
        if module is not None:
            module.add_parser(sub)
    return parser


def _optional_module(name: str):
    import importlib

    try:
        return importlib.import_module(f"shardkit.cli.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"shardkit.cli.{name}":
            raise
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ShardkitError, FileExistsError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        for note in getattr(exc, "__notes__", ()):
            print(f"  {note}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(main())
