"""The ``shardkit`` command line. Never imports torch at module level (bench/plan import lazily).

Exit codes: 0 ok; 1 the command ran and found a problem (verification failed, bad input while
packing); 2 usage error or an unreadable dataset/manifest — one line on stderr, no traceback;
141 when the reader of its output went away (``shardkit cache ls --json | head``), quietly.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
from collections.abc import Sequence

from shardkit import __version__
from shardkit.cli import audit_cmd, dataset_cmds, pack_cmd
from shardkit.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Parser
from shardkit.errors import ShardkitError

EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process ended by SIGPIPE
__all__ = ["EXIT_BROKEN_PIPE", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="shardkit",
        description="Pack, verify, inspect and stream sharded training datasets.",
    )
    parser.add_argument("--version", action="version", version=f"shardkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pack_cmd.add_parser(sub)
    dataset_cmds.add_parsers(sub)
    audit_cmd.add_parser(sub)
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
        code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        return _output_closed()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ShardkitError, FileExistsError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        for note in getattr(exc, "__notes__", ()):
            print(f"  {note}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_FAILED)


def _output_closed() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as Python's documentation on
    SIGPIPE advises — point stdout at /dev/null so the exit-time flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # stdout is not a file descriptor (captured in tests): nothing to redirect
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
