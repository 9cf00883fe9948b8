"""Peer-format folders built byte by byte (MDS, LitData, a Hugging Face ``.arrow`` file), so a
test can make them hostile in one place, and ``shardkit pack`` run on them in a child process
that cannot hang the test (a timeout is a failure) nor take the machine's memory (an address
space limit), reporting its exit code, peak RSS and output.

The layouts are the ones ``shardkit/write/imports/{mds,litdata}.py`` document; the real peer
libraries write the same bytes (tests/unit/write/test_import_*.py round-trip their output).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.hostile import SHARDKIT

LEAF = {"type": None, "context": None, "children_spec": []}
# The child runs pack under an address-space limit, so a bomb that the reader does not stop
# fails with MemoryError in the child instead of taking the machine's memory.
_LIMITED = (
    "import json, resource, subprocess, sys\n"
    "limit = int(sys.argv[1])\n"
    "def cap():\n"
    "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "try:\n"
    "    done = subprocess.run(sys.argv[2:], capture_output=True, text=True, timeout=60, preexec_fn=cap)\n"
    "    code, out = done.returncode, done.stdout + done.stderr\n"
    "except subprocess.TimeoutExpired:\n"
    "    code, out = 'timeout', ''\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(json.dumps({'code': code, 'peak_kib': peak, 'out': out}))\n"
)


def pack_limited(src: Any, out: Any, *extra: str, limit_gib: float = 3.0, env: dict[str, str] | None = None
                 ) -> tuple[int | str, int, str]:  # fmt: skip
    """``shardkit pack SRC OUT --no-progress *extra`` in a child limited to ``limit_gib`` of
    address space and 60 s: (exit code or ``"timeout"``, peak RSS in MiB, output)."""
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(int(limit_gib * (1 << 30))), SHARDKIT, "pack", str(src), str(out),
         "--no-progress", *extra],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )  # fmt: skip
    result = json.loads(done.stdout)
    return result["code"], result["peak_kib"] // 1024, result["out"]


# --- MosaicML Streaming (MDS) ---------------------------------------------------------------


def mds_shard(payloads: list[bytes]) -> bytes:
    """u32 count, u32 offsets[count + 1] from the file start, then the samples."""
    start = 4 + 4 * (len(payloads) + 1)
    offsets, at = [], start
    for payload in [b"", *payloads]:
        at += len(payload)
        offsets.append(at)
    return struct.pack(f"<I{len(offsets)}I", len(payloads), *offsets) + b"".join(payloads)


def text_sample(text: str) -> bytes:
    """One sample of a single variable-size ``str`` column: u32 size, then the bytes."""
    data = text.encode()
    return struct.pack("<I", len(data)) + data


def write_mds(root: Path, payloads: list[bytes], columns: list[tuple[Any, str, int | None]],
              zipped: tuple[str, bytes] | None = None, raw: bool = True, **entry: Any) -> dict[str, Any]:  # fmt: skip
    """An MDS folder of one shard; ``zipped``: (compression, the zip file's bytes), written as
    ``shard.00000.mds.<compression>``; ``raw=False`` leaves the raw file out. ``entry``
    overrides fields of the shard's index entry. Returns the index."""
    root.mkdir(parents=True, exist_ok=True)
    data = mds_shard(payloads)
    if raw:
        (root / "shard.00000.mds").write_bytes(data)
    shard = {
        "format": "mds", "version": 2, "hashes": [], "size_limit": 1 << 26,
        "column_names": [c[0] for c in columns], "column_encodings": [c[1] for c in columns],
        "column_sizes": [c[2] for c in columns], "samples": len(payloads), "compression": None,
        "raw_data": {"basename": "shard.00000.mds", "bytes": len(data), "hashes": {}}, "zip_data": None,
    }  # fmt: skip
    if zipped is not None:
        name = f"shard.00000.mds.{zipped[0]}"
        (root / name).write_bytes(zipped[1])
        shard.update(compression=zipped[0], zip_data={"basename": name, "bytes": len(zipped[1]), "hashes": {}})
    shard.update(entry)
    index = {"version": 2, "shards": [shard]}
    (root / "index.json").write_text(json.dumps(index))
    return index


# --- LitData ----------------------------------------------------------------------------------


def litdata_chunk(items: list[list[bytes]]) -> bytes:
    """u32 count, u32 offsets[count + 1] from the file start, items; an item is u32 size per
    leaf, then the leaves."""
    payloads = [struct.pack(f"<{len(leaves)}I", *map(len, leaves)) + b"".join(leaves) for leaves in items]
    return mds_shard(payloads)  # the same offset table as an MDS shard


def dict_spec(keys: list[str]) -> str:
    """The pytree spec of ``{key: leaf, …}``, as LitData writes it into ``config.data_spec``."""
    node = {"type": "builtins.dict", "context": json.dumps(keys), "children_spec": [LEAF] * len(keys)}
    return json.dumps([1, node])


def write_litdata(root: Path, chunk: bytes, formats: list[str], spec: str, count: int,
                  name: str = "chunk-0-0.bin", **config: Any) -> dict[str, Any]:  # fmt: skip
    """A LitData folder of one chunk file holding ``count`` items; ``config`` overrides the
    index's config (``compression``, ``compression_level`` …). Returns the index."""
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(chunk)
    index = {
        "chunks": [{"chunk_bytes": len(chunk), "chunk_size": count, "dim": None, "filename": name}],
        "config": {"chunk_bytes": None, "chunk_size": count, "compression": None, "data_format": formats,
                   "data_spec": spec, "encryption": None, "item_loader": "PyTreeLoader", **config},
        "updated_at": "0",
    }  # fmt: skip
    (root / "index.json").write_text(json.dumps(index))
    return index
