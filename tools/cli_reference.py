"""The CLI reference page, generated from ``shardkit.cli.build_parser()`` (docs/reference/cli.md).

Walks the parser and every subparser and writes one Markdown section per command: its
description, usage line and a table of arguments. The mkdocs hook (``tools/docs_hooks.py``) calls
``render()`` at build time, so the page always matches the parsers; ``python tools/cli_reference.py``
prints it. Imports only ``shardkit.cli`` (which never imports torch at module level).
"""

from __future__ import annotations

import argparse
import html
import os
import sys
from pathlib import Path

from shardkit.cli import build_parser

_EXIT_CODES = """\
## Exit codes

| code | meaning |
|---|---|
| 0 | ok |
| 1 | the command ran and found a problem (corrupt data, bad input while packing, `plan` of an epoch \
that yields no batch, `cache warm` that could not hold every shard, `verify --strict` with unlisted files) |
| 2 | usage error or an unreadable dataset or manifest: one line on stderr, never a traceback |
| 141 | the reader of the output went away (as when `shardkit cache ls --json` is piped into `head`), quietly |
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, help, parser)`` of each subcommand, in the order they were added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _cell(text: str) -> str:
    """One table cell: one line, no raw ``|`` or HTML, this machine's home shown as ``~``."""
    text = " ".join(text.split()).replace(str(Path.home()), "~")
    return html.escape(text, quote=False).replace("|", "&#124;")


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            name = ", ".join(f"`{s}`" for s in action.option_strings)
            if action.nargs != 0:
                name += f" `{action.metavar or action.dest.upper()}`"
        else:
            name = f"`{action.metavar or action.dest}`"
        default = ""
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
            default = f"`{action.default}`"
        choices = f" (one of {', '.join(f'`{c}`' for c in action.choices)})" if action.choices else ""
        help_text = (action.help or "") % {"default": action.default, "prog": parser.prog} if action.help else ""
        rows.append(f"| {name} | {_cell(help_text)}{choices} | {default} |")
    return rows


def _section(parser: argparse.ArgumentParser, level: int, summary: str) -> list[str]:
    lines = [f"{'#' * level} `{parser.prog}`", ""]
    if summary:
        lines += [summary[0].upper() + summary[1:] + ".", ""]
    if parser.description and parser.description != summary:
        lines += [" ".join(parser.description.split()), ""]
    usage = parser.format_usage().strip()  # argparse wraps it at $COLUMNS (render sets 100)
    lines += ["```text", usage, "```", ""]
    rows = _argument_rows(parser)
    if rows:
        lines += ["| argument | what it does | default |", "|---|---|---|", *rows, ""]
    if parser.epilog:
        lines += [" ".join(parser.epilog.split()), ""]
    for _name, help_text, sub in _subcommands(parser):
        lines += _section(sub, level + 1, help_text)
    return lines


def render() -> str:
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse's wrapping width for the usage lines
    try:
        return _render()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


def _render() -> str:
    parser = build_parser()
    parser.prog = "shardkit"
    head = [
        "# CLI reference",
        "",
        "Generated from the argparse parsers of `shardkit.cli` when the site is built "
        "(`tools/cli_reference.py`), so it lists exactly the options the installed `shardkit` takes. "
        "Every command also has `--help`; `--json` is there where a machine reads the output.",
        "",
        _EXIT_CODES,
        "`pack --overwrite` keeps the old dataset readable until the new manifest is published; "
        "`verify` warns about files the manifest does not name (`--strict`: exit 1). Written files get "
        "`0666 & ~umask`, cached shards `0444 & ~umask` (a shared cache dir and what its other users can "
        "and cannot do: \"Sharing a cache dir\" in [the cache spec](../specs/cache.md)).",
        "",
    ]
    body = []
    for _name, help_text, sub in _subcommands(parser):
        body += _section(sub, 2, help_text)
    top = _argument_rows(parser)
    tail = ["## Global options", "", "| argument | what it does | default |", "|---|---|---|", *top, ""]
    return "\n".join(head + body + tail)


if __name__ == "__main__":
    sys.stdout.write(render())
