"""Local Hugging Face datasets → samples, read with pyarrow (extra ``parquet``).

Accepted inputs:

* a ``Dataset.save_to_disk`` folder: ``state.json`` lists ``_data_files`` (Arrow IPC stream
  files ``data-00000-of-0000N.arrow``) next to ``dataset_info.json``
* a ``DatasetDict.save_to_disk`` folder: ``dataset_dict.json`` lists the splits, one
  ``save_to_disk`` folder each (pick one with ``split``)
* a hub cache folder (``~/.cache/huggingface/datasets/<name>/<config>/<version>/<hash>``):
  ``<builder>-<split>[-NNNNN-of-NNNNN].arrow`` files next to ``dataset_info.json``
* a folder or file of Parquet exports (``<config>/<split>/0000.parquet`` …), or one ``.arrow`` file

Rows keep Arrow's types (see ``arrow_rows``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from shardkit.errors import SourceError
from shardkit.write.imports.arrow_rows import batch_rows
from shardkit.write.imports.peer_files import inside, read_object
from shardkit.write.inputs import check_regular
from shardkit.write.sources import Item

_CACHE_FILE = re.compile(r"^(?P<builder>.+?)-(?P<split>[\w.]+?)(-\d{5}-of-\d{5})?\.arrow$")


def is_hf(path: str) -> bool:
    if os.path.isfile(path):
        return path.endswith(".arrow")
    names = set(os.listdir(path)) if os.path.isdir(path) else set()
    return bool({"state.json", "dataset_dict.json"} & names) or (
        "dataset_info.json" in names and any(n.endswith(".arrow") for n in names)
    )


def iter_hf(path: str, split: str | None = None) -> Iterator[Item]:
    """Every row of the chosen split's files, in file order; ``origin`` names file and row."""
    files = data_files(path, split)
    for file in files:  # all of them before the first row, so a missing one (or a FIFO) stops pack at once
        check_regular(file)
    for file in files:
        number = 0
        for batch in _batches(file):
            try:
                rows = batch_rows(batch)
            except (ValueError, TypeError, ArithmeticError) as exc:  # pyarrow's own errors are ValueErrors too
                raise SourceError(f"{file}: rows {number}..{number + batch.num_rows - 1} do not read: {exc}") from None
            for row in rows:
                yield Item(origin=f"{file}: row {number}", key=str(number), row=row)
                number += 1


def data_files(path: str, split: str | None) -> list[str]:
    """The Arrow or Parquet files that make up ``path`` (one split), in order."""
    if os.path.isfile(path):
        return [path]
    names = set(os.listdir(path)) if os.path.isdir(path) else set()
    if "dataset_dict.json" in names:
        splits = read_object(os.path.join(path, "dataset_dict.json")).get("splits", [])
        return data_files(inside(path, _pick(splits, split, path), path), None)
    if "state.json" in names:
        state_path = os.path.join(path, "state.json")
        files = read_object(state_path).get("_data_files")
        if not isinstance(files, list) or not files:
            raise SourceError(f"{state_path}: no '_data_files' list")
        return [inside(path, f.get("filename") if isinstance(f, dict) else None, state_path) for f in files]
    by_split: dict[str, list[str]] = {}
    for name in sorted(names):
        match = _CACHE_FILE.match(name)
        if match and not name.startswith(("cache-", "tmp")):  # .map()/.filter() results, partial writes
            by_split.setdefault(match["split"], []).append(os.path.join(path, name))
    if by_split:
        return by_split[_pick(sorted(by_split), split, path)]
    parquet = _parquet_files(path, split)
    if not parquet:
        raise SourceError(f"{path}: no save_to_disk state.json, cache .arrow files or .parquet files")
    return parquet


def _pick(splits: Any, split: str | None, path: str) -> str:
    if not isinstance(splits, list) or not splits:
        raise SourceError(f"{path}: no splits listed")
    if split is None and len(splits) == 1:
        return str(splits[0])
    if split not in splits:
        wanted = "pass --split" if split is None else f"split {split!r} is not one of them"
        raise SourceError(f"{path}: holds splits {', '.join(map(str, splits))}; {wanted}")
    return str(split)


def _parquet_files(root: str, split: str | None) -> list[str]:
    """``.parquet`` files under ``root``; with ``split``, those in a ``<split>`` folder or named ``<split>-*``."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".parquet")]
    if split is None:
        return found
    return [f for f in found if split in os.path.relpath(f, root).split(os.sep)[:-1]
            or os.path.basename(f).startswith(f"{split}-")]  # fmt: skip


def _batches(file: str) -> Iterator[Any]:
    """The file's record batches, each validated in full (PI13) before a row of it is read:
    offsets rise and stay inside their buffers, so a tampered file cannot make a read run
    past the end of a buffer."""
    try:
        import pyarrow as pa
    except ImportError:
        raise SourceError("reading Hugging Face datasets needs pyarrow: pip install 'shardkit[parquet]'") from None
    where = "record batch 0"
    try:
        for done, batch in enumerate(_raw_batches(file)):
            for name, values in zip(batch.schema.names, batch.columns, strict=True):
                where = f"record batch {done}, column {name!r}"
                values.validate(full=True)
            where = f"record batch {done}"
            batch.validate()  # every column as long as the batch
            yield batch
            where = f"record batch {done + 1}"
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"{file}: not a readable Arrow/Parquet file ({where}): {exc}") from None


def _raw_batches(file: str) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_regular(file)  # pyarrow opens it itself: a FIFO would block (PI10)
    if file.endswith(".parquet"):
        yield from pq.ParquetFile(file).iter_batches(batch_size=4096)
        return
    with pa.memory_map(file) as source:
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            yield from (reader.get_batch(i) for i in range(reader.num_record_batches))
            return
        yield from reader
