"""Every invariant ID cited anywhere is defined somewhere, and no prefix is shared by two specs.

Defined: ``**P1 …**`` at the start of a line (a list item) of ``specs/*.md`` and
``benchmarks/README.md`` (the targets T1–T7), and the ``| G1 |`` rows of ``docs/guarantees.md``.
The prefixes are learnt from those definitions. Cited: a prefix followed by digits, as a word,
in the Python and Markdown files of ``shardkit/``, ``tests/``, ``docs/``, ``specs/``,
``benchmarks/``, ``examples/``, ``tools/`` and the README. ``CHANGELOG.md`` is history and is not
checked; lint codes after ``noqa:`` are not citations; an ID a spec renumbered may be named
only where the renumbering is written down (``RENUMBERED``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_DEFINITION = re.compile(r"^\s*(?:[-*]\s+)?\*\*([A-Z]{1,3})(\d+)[a-z]?\b")
_GUARANTEE_ROW = re.compile(r"^\|\s*(G\d+)\s*\|")
_NOQA = re.compile(r"noqa:?[\sA-Z0-9,]*")
SCANNED = ("shardkit", "tests", "docs", "specs", "benchmarks", "examples", "tools")
SKIPPED_PARTS = {".venv", ".venv-bench", "site", ".git", "__pycache__", ".mypy_cache", ".ruff_cache"}
# Old ID → where the renumbering is recorded (the old ID may appear in those files only).
RENUMBERED = {f"L{n}": ("specs/resume-state.md", "specs/batch-transport.md") for n in range(7, 12)}


def definitions(root: Path = ROOT) -> dict[str, list[str]]:
    """Each defined ID → the files defining it (more than one is a defect)."""
    found: dict[str, list[str]] = {}
    sources = [*sorted((root / "specs").glob("*.md")), root / "benchmarks" / "README.md"]
    for path in sources:
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                match = _DEFINITION.match(line)
                if match and str(path.relative_to(root)) not in found.get(match.group(1) + match.group(2), []):
                    found.setdefault(match.group(1) + match.group(2), []).append(str(path.relative_to(root)))
    guarantees = root / "docs" / "guarantees.md"
    if guarantees.is_file():
        for line in guarantees.read_text(encoding="utf-8").splitlines():
            match = _GUARANTEE_ROW.match(line)
            if match:
                found.setdefault(match.group(1), []).append("docs/guarantees.md")
    return found


def prefix_of(invariant: str) -> str:
    return re.match(r"[A-Z]+", invariant).group()  # type: ignore[union-attr]


def scanned_files(root: Path = ROOT) -> list[Path]:
    files = [root / "README.md"]
    for folder in SCANNED:
        files += [p for p in sorted((root / folder).rglob("*")) if p.suffix in (".py", ".md")
                  and not SKIPPED_PARTS.intersection(p.relative_to(root).parts)]
    return [p for p in files if p.is_file()]


def dangling(root: Path = ROOT) -> list[str]:
    defined = definitions(root)
    prefixes = sorted({prefix_of(i) for i in defined}, key=len, reverse=True)
    alternatives = "|".join(prefixes)
    cite = re.compile(rf"(?<![A-Za-z0-9_./-])(?:{alternatives})\d+(?![A-Za-z0-9_])")
    bad = []
    for path in scanned_files(root):
        name = str(path.relative_to(root))
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for match in cite.finditer(_NOQA.sub("", line)):
                invariant = match.group()
                if invariant not in defined and name not in RENUMBERED.get(invariant, ()):
                    bad.append(f"{name}:{number}: {invariant} is defined nowhere")
    return bad


def test_every_cited_invariant_is_defined() -> None:
    bad = dangling()
    assert not bad, "invariant IDs cited but not defined (specs/*.md, docs/guarantees.md, benchmarks/README.md):\n" \
        + "\n".join(bad)


def test_one_spec_per_prefix_and_per_id() -> None:
    """A prefix belongs to one spec (``S`` was renamed ``SV``: S3 read as Amazon S3); no ID twice."""
    owners: dict[str, set[str]] = {}
    twice = []
    for invariant, files in definitions().items():
        owners.setdefault(prefix_of(invariant), set()).update(files)
        if len(files) > 1:
            twice.append(f"{invariant}: {files}")
    shared = {prefix: sorted(files) for prefix, files in owners.items() if len(files) > 1}
    assert not shared and not twice, f"prefixes in several files: {shared}; IDs defined twice: {twice}"
    assert "S" not in owners, "the S prefix reads as Amazon S3 in prose: use SV"


def test_the_checker_sees_a_dangling_id(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "a.md").write_text("- **Q1 One.** text\n- **Q2 Two.** text\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text('"""Q1, Q2 and Q3."""  # noqa: Q4\n')
    (tmp_path / "README.md").write_text("Q2 holds; see Q17.\n")
    assert sorted(dangling(tmp_path)) == ["README.md:1: Q17 is defined nowhere",
                                          "tests/test_a.py:1: Q3 is defined nowhere"]


_OLD_ID = re.compile(r"(?<![A-Za-z0-9_./-])S([1-4])(?![A-Za-z0-9_])")
_NESTING = re.compile(r"nest|deep|depth|level", re.IGNORECASE)


def _old_citation(line: str) -> bool:
    """S1, S2 or S4 as a word, or S3 on a line about nesting (elsewhere S3 is Amazon S3)."""
    found = {match.group(1) for match in _OLD_ID.finditer(_NOQA.sub("", line))}
    return bool(found - {"3"}) or ("3" in found and _NESTING.search(line) is not None)


def stale_sample_value_ids(root: Path = ROOT) -> list[str]:
    """Citations of specs/shard-format.md's S1–S4 by their old names (now SV1–SV4)."""
    bad = []
    for path in scanned_files(root):
        name = str(path.relative_to(root))
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if path != Path(__file__).resolve() and "numbered S1–S4" not in line and _old_citation(line):
                bad.append(f"{name}:{number}: {line.strip()[:100]}")
    return bad


def test_no_citation_of_the_old_sample_value_ids() -> None:
    """S1–S4 became SV1–SV4; an S3 next to "nesting" is the old ID, not Amazon S3."""
    bad = stale_sample_value_ids()
    assert not bad, "cite SV1–SV4 (specs/shard-format.md §6), not S1–S4:\n" + "\n".join(bad)


def test_the_old_ids_are_seen(tmp_path: Path) -> None:
    (tmp_path / "shardkit").mkdir()
    (tmp_path / "shardkit" / "a.py").write_text("# round trip (S2)\n# nested too deep (S3)\n# from S3, by range\n"
                                                "x = 1  # noqa: S301\n# SV3 nesting\n")
    assert [entry.split(":")[1] for entry in stale_sample_value_ids(tmp_path)] == ["1", "2"]
