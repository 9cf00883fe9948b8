"""The CLI reference page (tools/cli_reference.py) lists every command and option the parsers
have, and building it does not import torch (the CLI never does at module level)."""

from __future__ import annotations

import argparse
import subprocess
import sys

from tests.docs.code_blocks import ROOT


def _walk(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _walk(sub)
    return found


def test_every_command_and_option_is_in_the_reference() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import cli_reference
    finally:
        sys.path.remove(str(ROOT / "tools"))
    page = cli_reference.render()
    from shardkit.cli import build_parser

    missing = []
    for parser in _walk(build_parser())[1:]:
        name = "shardkit " + parser.prog.split(" ", 1)[1]
        if f"`{name}`" not in page:
            missing.append(name)
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help") and f"`{option}`" not in page:
                    missing.append(f"{name} {option}")
    assert not missing, f"not in the CLI reference: {missing}"


def test_building_the_reference_imports_no_torch() -> None:
    code = "import sys; sys.path.insert(0, 'tools'); import cli_reference; cli_reference.render(); " \
           "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
