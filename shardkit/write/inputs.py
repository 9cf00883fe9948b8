"""Which files ``shardkit pack`` reads, in which format, and how it opens them (specs/pack-inputs.md).

- Only regular files are read (symlinks followed): a FIFO, socket or device under the input
  would block or never end, so it is refused by name (PI1).
- Names decide the format (PI2): JSON Lines (``.jsonl``, ``.ndjson``, those or ``.json`` with
  ``.gz``/``.zst``), Parquet (``.parquet``), WebDataset (``.tar``), documentation
  (``README*``, ``*.md``, ``dataset_info.json`` …) or other.
- Auto-detection over a folder (PI3): one record format plus documentation → that format,
  documentation ignored with a logged notice; records of several formats, or records plus other
  files → refused, suggesting ``--format``; no records → ``files`` (documentation ignored when
  other files exist).
- Names are shown with bytes that are not UTF-8 escaped as ``\\xNN`` (PI5), so messages and
  the manifest's ``skipped`` list can always be written.
"""

from __future__ import annotations

import gzip
import logging
import os
import stat
from collections.abc import Iterable
from typing import BinaryIO

from shardkit.errors import SourceError
from shardkit.format.stream_codec import zstd_stream_reader

log = logging.getLogger(__name__)

RECORD_FORMATS = ("jsonl", "parquet", "wds")
_JSONL_BASES = (".jsonl", ".ndjson")
_SUFFIXES = {
    "jsonl": (*_JSONL_BASES, *(b + c for b in (*_JSONL_BASES, ".json") for c in (".gz", ".zst"))),
    "parquet": (".parquet",),
    "wds": (".tar",),
}
_DOC_PREFIXES = ("readme", "license", "licence", "copying", "notice", "citation", "changelog")
_DOC_SUFFIXES = (".md", ".markdown", ".rst", ".txt", ".pdf", ".html", ".yaml", ".yml", ".cff", ".bib")
_DOC_NAMES = {"dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json", "croissant.json"}
_SHOWN_IN_ERRORS = 5


def shown(path: str) -> str:
    """``path`` as text that is always valid UTF-8: bytes of the name that were not UTF-8
    (``os.fsdecode`` keeps them as surrogates) become ``\\xNN`` (PI5)."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def kind_of(name: str) -> str:
    """``jsonl`` | ``parquet`` | ``wds`` | ``doc`` | ``other`` for a file name (PI2)."""
    lower = os.path.basename(name).lower()
    for fmt, suffixes in _SUFFIXES.items():
        if lower.endswith(suffixes):
            return fmt
    if lower in _DOC_NAMES or lower.startswith(_DOC_PREFIXES) or lower.endswith(_DOC_SUFFIXES):
        return "doc"
    return "other"


def check_regular(path: str) -> None:
    """Refuse anything but a regular file (after following symlinks), naming it (PI1)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise SourceError(f"{shown(path)}: cannot read: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise SourceError(f"{shown(path)}: not a regular file ({_type_name(mode)}); pack reads only regular files")


def walk(root: str) -> list[str]:
    """Regular files under ``root``, sorted; names starting with ``.`` are skipped, and so are
    symlinks to folders (as ``os.walk`` does); anything else that is not a regular file is
    refused (PI1). The file type comes from the directory entry, so a folder of a million
    images costs no extra ``stat`` per file on any filesystem that reports types."""
    if not os.path.isdir(root):
        raise SourceError(f"{shown(root)}: not a folder (files grouped by key are read from a folder)")
    out: list[str] = []
    folders = [root]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir():
                    if not entry.is_symlink():
                        folders.append(entry.path)
                elif entry.is_file():
                    out.append(entry.path)
                else:
                    check_regular(entry.path)  # raises, naming what it is
    return sorted(out)


def detect_format(path: str) -> str:
    """The format ``--format auto`` picks for a file or folder (PI3)."""
    if not os.path.isdir(path):
        check_regular(path)
        kind = kind_of(path)
        if kind not in RECORD_FORMATS:
            raise SourceError(f"{shown(path)}: cannot tell the format from the name; pass --format")
        return kind
    files = walk(path)
    if not files:
        raise SourceError(f"{shown(path)}: no input files (empty folder?)")
    groups = _by_kind(files)
    records = [fmt for fmt in RECORD_FORMATS if fmt in groups]
    if len(records) > 1:
        counts = ", ".join(f"{len(groups[fmt])} {fmt}" for fmt in records)
        raise SourceError(f"{shown(path)}: holds files of several formats ({counts}); pass --format to choose one")
    if records and "other" in groups:
        fmt = records[0]
        raise SourceError(
            f"{shown(path)}: holds {len(groups[fmt])} {fmt} file(s) and {len(groups['other'])} other file(s) "
            f"({_examples(groups['other'])}); pass --format {fmt} to pack only the {fmt} files, "
            "or --format files to pack every file grouped by key"
        )
    return records[0] if records else "files"


def input_files(path: str, fmt: str, auto: bool = False) -> list[str]:
    """The files ``pack --format fmt`` reads from ``path``, in order; files it leaves out are
    named in one logged notice (PI4). ``auto``: the format was detected, so documentation is
    left out of ``files`` too (unless it is all there is)."""
    if not os.path.isdir(path):
        check_regular(path)
        return [path]
    files = walk(path)
    if fmt == "files":
        groups = _by_kind(files)
        docs = groups.get("doc", [])
        ignored = docs if auto and len(docs) < len(files) else []
    else:
        ignored = [f for f in files if kind_of(f) != fmt]
    if ignored and fmt == "files":
        log.warning("%s: ignoring %d documentation file(s) (%s); pass --format files to pack them too",
                    shown(path), len(ignored), _examples(ignored))
    elif ignored:
        log.warning("%s: ignoring %d file(s) that are not %s input (%s); pass --format to choose",
                    shown(path), len(ignored), fmt, _examples(ignored))
    left_out = set(ignored)
    chosen = [f for f in files if f not in left_out]
    if not chosen:
        raise SourceError(f"{shown(path)}: no {fmt} input files" + (f" (it holds {_examples(files)})" if files else ""))
    return chosen


def open_input(path: str) -> BinaryIO:
    """A regular file opened for reading, decompressed by name (``.gz``, ``.zst``) (PI1, PI2)."""
    raw = open_regular(path)
    lower = path.lower()
    if lower.endswith(".gz"):
        return _GzipInput(raw)  # type: ignore[return-value]
    if lower.endswith(".zst"):
        return zstd_stream_reader(raw)
    return raw


def open_regular(path: str) -> BinaryIO:
    """A regular file opened for reading as it is (PI1); ``SourceError`` naming anything else.

    Opened without blocking, then checked, so a FIFO swapped in after discovery cannot hang."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SourceError(f"{shown(path)}: cannot read: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SourceError(f"{shown(path)}: not a regular file ({_type_name(mode)}); pack reads only regular files")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


class _GzipInput(gzip.GzipFile):
    """A gzip stream that closes the file it reads (``GzipFile(fileobj=…)`` leaves it open)."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _by_kind(files: Iterable[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for file in files:
        groups.setdefault(kind_of(file), []).append(file)
    return groups


def _examples(files: list[str]) -> str:
    names = ", ".join(shown(f) for f in files[:_SHOWN_IN_ERRORS])
    return names + (f", … {len(files) - _SHOWN_IN_ERRORS} more" if len(files) > _SHOWN_IN_ERRORS else "")


def _type_name(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return f"mode {mode:o}"
