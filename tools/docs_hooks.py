"""mkdocs hooks for the docs site (mkdocs.yml ``hooks:``).

- Pages generated at build time, never written into ``docs/``: ``specs/*.md`` (the specs, from
  the repo's ``specs/`` folder, which tests cite by path), ``benchmarks/*.md`` and its plot, the
  CLI reference from the argparse parsers (``tools/cli_reference.py``) and the API reference
  from ``shardkit.__all__`` (rendered by mkdocstrings from the docstrings).
- Links written as repo paths, so that they also work when the Markdown is read on GitHub
  (``../specs/cache.md`` from ``docs/how-to/s3-cache.md``), are rewritten to the site's pages.
"""

from __future__ import annotations

import ast
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")
_INCLUDED = {"specs": ("*.md",), "benchmarks": ("*.md", "*.png")}


def _public_names() -> list[tuple[str, str]]:
    """``(module, name)`` for each name in ``shardkit.__all__``, read from the source (no import)."""
    tree = ast.parse((ROOT / "shardkit" / "__init__.py").read_text())
    lazy: dict[str, str] = {}
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == "_LAZY":
                lazy = ast.literal_eval(node.value)
            elif node.targets[0].id == "__all__":
                names = ast.literal_eval(node.value)
    return [(lazy[n], n) for n in names if n in lazy]


def api_reference() -> str:
    lines = [
        "# API reference",
        "",
        "Every public name of `import shardkit as sk` (`shardkit.__all__`), from its docstring. "
        "Generated when the site is built.",
        "",
    ]
    for module, name in sorted(_public_names(), key=lambda item: item[1].lower()):
        lines += [f"## `sk.{name}`", "", f"::: {module}.{name}", "    options:", "      show_root_heading: false",
                  "      heading_level: 3", ""]
    return "\n".join(lines)


def _generated(config: Any) -> dict[str, str | bytes]:
    from cli_reference import render  # tools/ is on sys.path while hooks load

    pages: dict[str, str | bytes] = {"reference/cli.md": render(), "reference/api.md": api_reference()}
    for folder, patterns in _INCLUDED.items():
        for pattern in patterns:
            for path in sorted((ROOT / folder).glob(pattern)):
                pages[f"{folder}/{path.name}"] = path.read_bytes() if path.suffix == ".png" else path.read_text()
    return pages


def on_files(files: Files, config: Any) -> Files:
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    for src_uri, content in _generated(config).items():
        files.append(File.generated(config, src_uri, content=content))
    return files


def _origin(src_uri: str) -> str:
    """The repo path a site page comes from."""
    top = src_uri.split("/", 1)[0]
    return src_uri if top in _INCLUDED else f"docs/{src_uri}"


def _site_path(repo_path: str) -> str | None:
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/"):]
    if repo_path.split("/", 1)[0] in _INCLUDED:
        return repo_path
    return None


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    src = page.file.src_uri
    here = posixpath.dirname(_origin(src))

    def fix(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith(("mailto:", "/")):
            return match.group(0)
        repo_path = posixpath.normpath(posixpath.join(here, target))
        site = _site_path(repo_path)
        if site is None or files.get_file_from_path(site) is None:
            return match.group(0)  # mkdocs reports it (strict: the build fails)
        new = posixpath.relpath(site, posixpath.dirname(src) or ".")
        return f"{match.group(1)}{new}{match.group(3) or ''}{match.group(4)}"

    return _LINK.sub(fix, markdown)


__all__ = ["api_reference", "on_files", "on_page_markdown"]
