"""Proving that a decoded companion says what the JSON says (specs/manifest.md M20).

The xxh64 a companion records of "its" JSON is written by whoever wrote the companion, so it
binds nothing: anyone can record the hash of a genuine ``manifest.json`` in a forged
``manifest.bin``. What binds them is that a writer's JSON is a function of the manifest
(``Manifest.to_json``): a reader re-encodes the manifest it decoded from the companion into the
exact text a writer would have written, and uses the companion only if that text *is* the
JSON it holds, byte for byte. The JSON then decodes to the same manifest (it is its
encoding), so the companion spared the parse and decided nothing. A JSON any other program
formatted does not match and is parsed instead: the JSON always wins.

The text is formatted and compared in slices (``_SLICE`` shards at a time): no per-shard
objects, memory bounded whatever the shard count.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from shardkit.format.manifest import JSON_INDENT, Manifest, json_head
from shardkit.format.manifest_companion import ShardTable

_SLICE = 8192
_ENTRY = (
    '  {\n   "name": "%s",\n   "num_samples": %d,\n   "num_bytes": %d,\n   "num_blocks": %d,\n'
    '   "raw_bytes": %d,\n   "index_bytes": %d,\n   "checksum": "xxh64:%s"\n  }'
)
_COLUMNS = ("num_samples", "num_bytes", "num_blocks", "raw_bytes", "index_bytes")


def describes_json(manifest: Manifest, data: bytes) -> bool:
    """``data`` is exactly the ``manifest.json`` a writer writes for ``manifest`` (decoded from a
    companion: its shards a ``ShardTable``)."""
    table = manifest.shards
    if not isinstance(table, ShardTable) or JSON_INDENT != 1:  # _ENTRY is the indent-1 layout
        return False
    head = json.dumps(json_head(manifest, manifest.fingerprint), indent=JSON_INDENT, ensure_ascii=False)
    if not len(table):
        return data == (head[:-2] + ',\n "shards": []\n}\n').encode()
    position = 0
    for piece in _pieces(table, head[:-2] + ',\n "shards": [\n'):
        if not data.startswith(piece, position):  # a memcmp, no copy
            return False
        position += len(piece)
    return position == len(data)


def _pieces(table: ShardTable, prefix: str) -> Iterator[bytes]:
    """The JSON text in pieces: ``prefix``, then ``_SLICE`` shard entries at a time, then the end."""
    yield prefix.encode()
    names, checksums = table.names, table.column("checksum")
    columns = [table.column(key) for key in _COLUMNS]
    for lo in range(0, len(table), _SLICE):
        hi = min(lo + _SLICE, len(table))
        hexes = checksums[lo:hi].astype(">u8").tobytes().hex()
        rows = zip(names[lo:hi], *(column[lo:hi].tolist() for column in columns),
                   [hexes[i:i + 16] for i in range(0, 16 * (hi - lo), 16)], strict=True)
        text = ",\n".join([_ENTRY] * (hi - lo)) % tuple(value for row in rows for value in row)
        yield ((",\n" if lo else "") + text).encode()
    yield b"\n ]\n}\n"
