"""Docs that can't point at nothing: every repo path a Markdown page names in backticks
(``shardkit/...``, ``tests/...``, ``benchmarks/...``, ``specs/...``, ``docs/...``, ``tools/...``,
``examples/...``, ``results/...``) exists, globs included, and every bare ``name.py`` a page
names is a module of the tree. The change log is history and is not checked.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = ("shardkit/", "tests/", "benchmarks/", "specs/", "docs/", "tools/", "examples/", "results/")
CODE_SPAN = re.compile(r"`([^`\s]+)`")


def pages() -> list[Path]:
    found = [ROOT / "README.md"]
    for pattern in ("docs/**/*.md", "specs/*.md", "benchmarks/*.md", "examples/**/*.md"):
        found += sorted(ROOT.glob(pattern))
    return [p for p in found if p.is_file()]


def dangling(page: Path, modules: set[str]) -> list[str]:
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    bad = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for span in CODE_SPAN.findall(line):
            target = span.split("::")[0].rstrip(",.;:")
            if any(mark in target for mark in "{<"):
                continue  # a template (``tests/golden/v<major>/``), not a path
            if target.startswith(PREFIXES):
                places = (ROOT / target, page.parent / target, ROOT / "benchmarks" / target)
                if not any(glob.glob(str(place)) for place in places):
                    bad.append(f"{name}:{number}: {target}")
            elif re.fullmatch(r"[a-z_0-9]+\.py", target) and target not in modules:
                bad.append(f"{name}:{number}: {target} (no module of that name)")
    return bad


def test_every_path_a_doc_names_exists() -> None:
    modules = {p.name for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    bad = [entry for page in pages() for entry in dangling(page, modules)]
    assert not bad, "docs name paths that do not exist:\n" + "\n".join(bad)


def test_the_checker_sees_a_dangling_path(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("see `benchmarks/results/nothing-here.json` and `layout.py`, not `shardkit/errors.py`\n")
    bad = dangling(page, {"errors.py"})
    assert [entry.split(": ", 1)[1] for entry in bad] == [
        "benchmarks/results/nothing-here.json", "layout.py (no module of that name)"]
