"""Raw sources for ``shardkit pack``: each yields *items* (cheap to read) in a deterministic
order, and a pure ``to_sample(item)`` turns one item into a sample dict (may run in a worker).

Formats: ``files`` (WebDataset-style groups by key: ``a/0001.jpg`` + ``a/0001.json``),
``jsonl`` (also gzip/zstd compressed), ``parquet`` (extra ``parquet``) and ``wds`` (WebDataset
``.tar`` shards). Which files are read, and how the format is detected: ``inputs.py``
(specs/pack-inputs.md).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardkit.errors import SourceError
from shardkit.format.stream_codec import ZSTD_STREAM_ERRORS
from shardkit.write.inputs import input_files, open_input, shown, walk

FORMATS = ("files", "jsonl", "parquet", "wds", "text")
TEXT_SUFFIXES = (".txt", ".text")
_INT_EXTS = {"cls", "cls2", "index", "inx", "id"}
_TEXT_EXTS = {"txt", "text", "transcript"}
_JSON_EXTS = {"json", "jsn"}
_READ_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError, *ZSTD_STREAM_ERRORS)


@dataclass(frozen=True)
class Item:
    """One raw sample before decoding: where it came from and its raw parts."""

    origin: str  # file (and line/row) for error messages
    key: str
    parts: dict[str, bytes] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # read in to_sample (in the worker)
    label: int | None = None
    row: Any = None  # a Parquet row; with a map function, any input record (TB10)


def skip_entry(origin: str, exc: BaseException) -> dict[str, str]:
    """One entry of the manifest's ``skipped`` list: always valid UTF-8 (PI5)."""
    return {"origin": shown(origin), "error": shown(str(exc))}


def decode_part(ext: str, data: bytes, origin: str) -> Any:
    """A file's bytes → value by extension (the WebDataset conventions)."""
    try:
        last = ext.rsplit(".", 1)[-1].lower()
        if last in _INT_EXTS:
            return int(data.decode().strip())
        if last in _TEXT_EXTS:
            return data.decode()
        if last in _JSON_EXTS:
            return json.loads(data)
        if last == "npy":
            return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        raise SourceError(f"{origin}: cannot parse .{ext}: {exc}") from None
    return data


def to_sample(item: Item) -> dict[str, Any]:
    """The sample for one item. Pure; raises ``SourceError`` naming the file."""
    if item.row is not None:
        return item.row
    if shown(item.key) != item.key:
        raise SourceError(f"{item.origin}: the file name is not valid UTF-8, so it cannot be a key; rename it")
    sample: dict[str, Any] = {"__key__": item.key}
    for ext, path in item.paths.items():
        sample[ext] = decode_part(ext, _read_file(path), shown(path))
    for ext, data in item.parts.items():
        sample[ext] = decode_part(ext, data, f"{item.origin}.{ext}")
    if item.label is not None:
        sample["label"] = item.label
    return sample


def iter_files(root: str, label_from_dir: bool = False, auto: bool = False) -> tuple[Iterator[Item], dict[str, int]]:
    """File groups by key (relative path up to the first dot of the basename), sorted by key.
    ``auto``: the format was detected, so documentation files are left out (``input_files``).

    An *image folder* — every key a single image file (PI14) — gives one ``image`` field (the
    file's bytes) whatever the extension; laid out ``<class>/<image>`` it also gives a ``label``
    (PI15), as ``label_from_dir`` does for any ``<class>/…`` layout."""
    groups: dict[str, dict[str, str]] = {}
    for path in input_files(root, "files", auto) if auto else walk(root):
        rel = os.path.relpath(path, root)
        folder, base = os.path.split(rel)
        stem, dot, ext = base.partition(".")
        if not dot or not ext:
            raise SourceError(f"{shown(path)}: file has no extension; cannot group it by key")
        key = os.path.join(folder, stem) if folder else stem
        group = groups.setdefault(key, {})
        if ext in group:
            raise SourceError(f"{shown(path)}: duplicate .{shown(ext)} for key {shown(key)!r}")
        group[ext] = path
    images = is_image_folder(groups)
    class_folders = images and all(key.count(os.sep) == 1 for key in groups)
    classes = _classes(root, groups) if label_from_dir or class_folders else {}

    def items() -> Iterator[Item]:
        for key in sorted(groups):
            paths = {IMAGE_FIELD: next(iter(groups[key].values()))} if images else dict(sorted(groups[key].items()))
            label = classes.get(key.split(os.sep)[0]) if classes else None
            yield Item(origin=shown(os.path.join(root, key)), key=key, paths=paths, label=label)

    return items(), classes


IMAGE_FIELD = "image"
#: PI14: the extensions (case-insensitive) of the files an image folder holds.
IMAGE_EXTS = frozenset({"jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff"})


def is_image_folder(groups: dict[str, dict[str, str]]) -> bool:
    """Every key is one file, and an image by its extension (PI14)."""
    return bool(groups) and all(
        len(group) == 1 and next(iter(group)).rsplit(".", 1)[-1].lower() in IMAGE_EXTS for group in groups.values()
    )


def _classes(root: str, groups: dict[str, dict[str, str]]) -> dict[str, int]:
    """Class folder name → label, in sorted name order (PI15)."""
    names = sorted({k.split(os.sep)[0] for k in groups if os.sep in k})
    if not names:
        raise SourceError(f"{shown(root)}: --label-from-dir needs a <class>/<file> layout")
    for name in names:
        if shown(name) != name:
            raise SourceError(f"{shown(os.path.join(root, name))}: a class folder name must be valid UTF-8")
    return {name: i for i, name in enumerate(names)}


def _read_file(path: str) -> bytes:
    try:
        with open_input(path) as fh:
            return fh.read()
    except OSError as exc:
        raise SourceError(f"{shown(path)}: cannot read: {exc.strerror}") from None


def iter_jsonl(path: str) -> Iterator[Item]:
    """One item per non-empty line (of the decompressed file); parsed in ``parse_jsonl_item``."""
    for file in input_files(path, "jsonl"):
        number = 0
        try:
            with open_input(file) as fh:
                for number, line in enumerate(fh, 1):
                    if line.strip():
                        yield Item(origin=f"{shown(file)}:{number}", key=f"{number}", parts={"": line})
        except _READ_ERRORS as exc:
            raise SourceError(f"{shown(file)}: cannot read after line {number}: {exc}") from None


def parse_jsonl_item(item: Item) -> dict[str, Any]:
    try:
        row = json.loads(item.parts[""])
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        raise SourceError(f"{item.origin}: not valid JSON: {exc}") from None
    if not isinstance(row, dict):
        raise SourceError(f"{item.origin}: a JSONL line must be an object, got {type(row).__name__}")
    return row


def iter_text(path: str) -> Iterator[Item]:
    """One item per line of a UTF-8 text file (or of each ``.txt``/``.text`` file of a folder,
    sorted); parsed in ``parse_text_item``."""
    files = [f for f in walk(path) if f.lower().endswith(TEXT_SUFFIXES)] if os.path.isdir(path) else [path]
    if not files:
        raise SourceError(f"{shown(path)}: no text input files ({', '.join(TEXT_SUFFIXES)})")
    for file in files:
        number = 0
        try:
            with open_input(file) as fh:
                for number, line in enumerate(fh, 1):
                    yield Item(origin=f"{shown(file)}:{number}", key=f"{number}", parts={"": line})
        except _READ_ERRORS as exc:
            raise SourceError(f"{shown(file)}: cannot read after line {number}: {exc}") from None


def parse_text_item(item: Item) -> dict[str, Any]:
    """``{"text": line}``, the newline removed."""
    try:
        return {"text": item.parts[""].rstrip(b"\r\n").decode("utf-8")}
    except UnicodeDecodeError as exc:
        raise SourceError(f"{item.origin}: not UTF-8 text: {exc}") from None


def iter_wds(path: str) -> Iterator[Item]:
    """Groups of consecutive tar members sharing a key, from each ``.tar`` in order."""
    for file in input_files(path, "wds"):
        try:
            yield from _tar_items(file)
        except (OSError, EOFError, tarfile.TarError) as exc:
            raise SourceError(f"{shown(file)}: not a readable tar: {exc}") from None


def _tar_items(file: str) -> Iterator[Item]:
    with open_input(file) as fh, tarfile.open(fileobj=fh, mode="r:*") as tar:
        key: str | None = None
        parts: dict[str, bytes] = {}
        for member in tar:
            if not member.isfile():
                continue
            folder, base = os.path.split(member.name)
            stem, _, ext = base.partition(".")
            member_key = os.path.join(folder, stem) if folder else stem
            if member_key != key and parts:
                yield Item(origin=f"{shown(file)}:{shown(str(key))}", key=str(key), parts=parts)
                parts = {}
            key = member_key
            handle = tar.extractfile(member)
            parts[ext] = handle.read() if handle else b""
        if parts:
            yield Item(origin=f"{shown(file)}:{shown(str(key))}", key=str(key), parts=parts)
