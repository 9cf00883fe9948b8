"""The fenced code blocks of the README and the guides, as the docs test runs them.

A block is a fenced ```` ```python ```` or ```` ```bash ```` block. An HTML comment on the line
right above the fence says what to do with it:

- ``<!-- not run: REASON -->``: shown, never run (it needs S3, a GPU, your own model…); the
  reason is required.
- ``<!-- file: NAME -->``: written to ``NAME`` in the page's workspace instead of run (a script
  a later block runs, a mixture ``.toml``); any language.
- anything else (``<!-- setup: … -->``) is a label: the block runs.

Every other python or bash block runs, in page order, in one workspace per page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = ("python", "bash")
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!--\s*(not run|file|setup)\s*:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # repo-relative path
    line: int  # of the opening fence
    language: str
    code: str
    mark: str | None  # "not run", "file", "setup" or None
    argument: str  # the reason, the file name or the label

    @property
    def runs(self) -> bool:
        return self.mark not in ("not run", "file") and self.language in RUN_LANGUAGES

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def readme() -> Path:
    """The root README."""
    return ROOT / "README.md"


def pages() -> list[Path]:
    found = [readme(), ROOT / "docs" / "getting-started.md"]
    for pattern in ("docs/how-to/*.md", "docs/concepts/*.md"):
        found += sorted(ROOT.glob(pattern))
    return [page for page in found if page.is_file()]


def blocks(page: Path) -> list[Block]:
    name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)
    lines = page.read_text(encoding="utf-8").splitlines()
    found, number = [], 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        if opening is None or not opening.group(1):
            number += 1
            continue
        end = number + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{name}:{number + 1}: a code block that never closes")
        mark = _MARK.match(lines[number - 1].strip()) if number > 0 else None
        found.append(Block(name, number + 1, opening.group(1), "\n".join(lines[number + 1:end]) + "\n",
                           mark.group(1) if mark else None, mark.group(2) if mark else ""))
        number = end + 1
    return found


def packs_out(page_blocks: list[Block]) -> bool:
    """Whether the page itself packs ``out/`` (so its workspace must not have one yet)."""
    return any(b.runs and b.language == "bash" and re.search(r"shardkit pack \S+ out/(\s|$)", b.code)
               for b in page_blocks)
