"""The README's relative links point at files that exist. The site's pages are checked by
``mkdocs build --strict`` (``make lint``); the README is not part of the site, so it is checked
here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.code_blocks import ROOT, readme

_LINK = re.compile(r"\]\(([^)\s]+)\)")


def broken_links(text: str, base: Path) -> list[str]:
    bad = []
    for target in _LINK.findall(text):
        path = target.split("#", 1)[0]
        if not path or "://" in path or path.startswith("mailto:"):
            continue
        if not (base / path).exists():
            bad.append(target)
    return bad


def test_readme_links_exist() -> None:
    bad = broken_links(readme().read_text(encoding="utf-8"), ROOT)
    assert not bad, f"{readme().relative_to(ROOT)} links to files that do not exist: {bad}"


def test_a_broken_link_is_seen(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("")
    text = "[a](docs/a.md#x) [b](docs/b.md) [c](https://example.org/x) [d](#top)"
    assert broken_links(text, tmp_path) == ["docs/b.md"]
