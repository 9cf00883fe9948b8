"""The README's python blocks, the guides' and ``examples/`` type-check: ``mypy`` sees what
``StreamingDataset(...)`` really returns and which keywords it takes, so a user's checker accepts
the calls the docs show (one class, its keywords typed: loader/compose.py).

Each block is written to a module of its own (blocks of one page do not share names; a block
shown but not run may use names from the text around it), and mypy runs once over all of them
and the examples, with the project's settings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.code_blocks import ROOT, blocks, pages

pytestmark = pytest.mark.slow


def test_docs_blocks_and_examples_type_check(tmp_path: Path) -> None:
    written = []
    for page in pages():
        for block in blocks(page):
            if block.language != "python" or block.mark == "file":
                continue
            name = f"block_{len(written):03d}.py"
            # A block shown but not run may be a fragment (names from the text around it): those
            # names are unknown (Any) to the checker; every call it shows is still checked.
            header = "" if block.runs else '# mypy: disable-error-code="name-defined"\n'
            (tmp_path / name).write_text(f"# {block.where()}\n{header}{block.code}", encoding="utf-8")
            written.append(name)
    assert written, "no python blocks found"
    examples = sorted(str(p) for p in (ROOT / "examples").glob("*.py"))
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--no-incremental",
           "--follow-imports=silent", *written, *examples]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
                          env={"PYTHONPATH": str(ROOT), "PATH": str(Path(sys.executable).parent)})
    report = done.stdout + done.stderr
    for name in written:  # name the page and line of a failing block, not its temp file
        first = (tmp_path / name).read_text(encoding="utf-8").splitlines()[0][2:]
        report = report.replace(name, f"{name} ({first})")
    assert done.returncode == 0, report
