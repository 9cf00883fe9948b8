"""The public names of ``import shardkit as sk``: listed, typed for checkers, lazy for torch."""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import shardkit as sk


def test_every_public_name_is_listed_by_dir_and_resolves():
    assert sk.__all__ == sorted(sk.__all__)
    assert set(sk.__all__) <= set(dir(sk))
    for name in sk.__all__:
        assert getattr(sk, name) is not None


def test_every_lazy_name_has_a_type_checking_import_from_the_same_module():
    tree = ast.parse(pathlib.Path(sk.__file__).read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom):
                    typed.update({alias.name: statement.module or "" for alias in statement.names})
    assert typed == sk._LAZY
    assert set(sk.__all__) == {"__version__", *sk._LAZY}


def test_the_version_is_written_once_and_the_package_declares_its_types():
    root = pathlib.Path(sk.__file__).parent.parent
    assert 'dynamic = ["version"]' in (root / "pyproject.toml").read_text()
    assert (root / "shardkit" / "py.typed").exists()
    assert importlib.import_module("shardkit.cli").__version__ == sk.__version__


def test_importing_shardkit_and_its_writer_does_not_import_torch():
    code = "import sys, shardkit, shardkit.write, shardkit.format; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_token_blocks_are_public_and_need_no_torch():
    """specs/token-blocks.md: ``sk.TokenBlocks`` configures ``sk.StreamingDataset(..., tokens=...)``."""
    assert "TokenBlocks" in sk.__all__
    code = "import sys, shardkit as sk; sk.TokenBlocks(8); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
