"""The writer's per-sample length index (specs/manifest.md M10-M13): which fields get one, and
their lengths gathered block by block in sample order.

``length_index=None`` (the default) records every field that is an integer array of at least
one dimension in every sample (an LM dataset's ``tokens``, with no option to set); a sequence
of names records exactly those fields, and a sample where one of them is not an integer array
is an ``EncodeError``; ``()`` records none. A field with a length of 2**32 or more gets no
index (readers scan instead). Lengths come from the arranged blocks (``block_lengths``), so
they are the same for any ``pack --workers`` and for samples written already encoded.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardkit.errors import EncodeError
from shardkit.format.checksum import xxh64_text
from shardkit.format.length_index import LENGTHS_DTYPE, LengthsInfo, encode_lengths, lengths_file_name
from shardkit.storage import Store
from shardkit.write.output import Output

_MAX_LENGTH = int(np.iinfo(LENGTHS_DTYPE).max)


class LengthRecorder:
    """The lengths of the recorded fields, block by block, in sample order. Not thread-safe."""

    def __init__(self, fields: Sequence[str] | None = None) -> None:
        if isinstance(fields, str):
            raise TypeError(f"length_index must be a sequence of field names, not the string {fields!r}")
        self.required = None if fields is None else tuple(fields)
        self._parts: dict[str, list[np.ndarray]] | None = None  # None until the first block
        self._too_long: set[str] = set()
        self.num_samples = 0

    def add(self, found: dict[str, np.ndarray], num_samples: int) -> None:
        """The lengths ``block_lengths`` found in the next block of ``num_samples`` samples."""
        if self.required is not None:
            self._check_required(found, num_samples)
        if self._parts is None:
            wanted = found if self.required is None else {f: found[f] for f in self.required}
            self._parts = {f: [] for f in wanted}
        for name in [f for f in self._parts if f not in found]:  # not a document in every sample
            del self._parts[name]
        for name, parts in self._parts.items():
            lengths = found[name]
            if len(lengths) and int(lengths.max()) > _MAX_LENGTH:
                self._too_long.add(name)
            parts.append(lengths.astype(LENGTHS_DTYPE))
        self.num_samples += num_samples

    def _check_required(self, found: dict[str, np.ndarray], num_samples: int) -> None:
        missing = [f for f in self.required or () if f not in found]
        if missing:
            first, stop = self.num_samples, self.num_samples + num_samples
            raise EncodeError(
                f"length_index: field {missing[0]!r} is missing or not an integer array in "
                f"one of samples {first}..{stop - 1} (length_index names fields that every "
                "sample holds as an integer array)"
            )

    def finish(self) -> dict[str, bytes]:
        """The index file bytes of every recorded field, in field order."""
        if not self._parts:
            return {}
        return {
            name: encode_lengths(np.concatenate(parts) if parts else np.zeros(0, LENGTHS_DTYPE))
            for name, parts in self._parts.items()
            if name not in self._too_long
        }


def combine_parts(parts: Sequence[tuple[int, dict[str, bytes]]]) -> dict[str, bytes]:
    """The index files of a dataset written in parts (Ray tasks, in order), from each part's
    ``(num_samples, finish())``: the fields every part with samples recorded, joined."""
    filled = [files for num_samples, files in parts if num_samples]
    if not filled:
        return {}
    return {name: b"".join(files[name] for files in filled) for name in filled[0] if all(name in f for f in filled)}


def write_length_files(
    store: Store, output: Output, files: dict[str, bytes], written: list[str]
) -> tuple[LengthsInfo, ...]:
    """Write the index files (M10, M13) next to the shards (``written`` gets each name first,
    for the cleanup of a failure); their manifest entries, in field order."""
    entries = []
    for k, (name, data) in enumerate(files.items()):
        path = output.file_name(lengths_file_name(k))
        written.append(path)
        store.write_atomic(path, data)
        entries.append(LengthsInfo(name, path, len(data), xxh64_text(data)))
    return tuple(entries)
