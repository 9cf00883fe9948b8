"""Hostile datasets for bound checks: a small shard that declares a huge block, and running
the real ``shardkit`` command in a subprocess while measuring its peak resident memory."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import zstandard

from shardkit.format import Manifest
from shardkit.format.block_codec import CODEC_ZSTD
from shardkit.format.shard_builder import SealedBlock, build_shard

SHARDKIT = os.path.join(os.path.dirname(sys.executable), "shardkit")
# Runs argv as a child and prints its exit code and peak RSS (KiB on Linux) as JSON.
_MEASURE = (
    "import json, resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=120)\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(json.dumps({'code': done.returncode, 'peak_kib': peak, 'out': done.stdout + done.stderr}))\n"
)


def bomb_block(raw_size: int) -> SealedBlock:
    """One honest zstd block holding a single sample ``{"b": <raw_size - 8 zero bytes>}``:
    its frame declares ``raw_size`` and really decompresses to it, in a few KB."""
    head = b"\x81\xa1b\xc6" + (raw_size - 8).to_bytes(4, "big")  # map{"b": bin32}, 8 bytes
    out = io.BytesIO()
    writer = zstandard.ZstdCompressor(level=1, write_content_size=True).stream_writer(
        out, size=raw_size, closefd=False
    )
    writer.write(head)
    zeros, left = bytes(1 << 20), raw_size - len(head)
    while left:
        writer.write(zeros[: min(left, len(zeros))])
        left -= min(left, len(zeros))
    writer.close()
    return SealedBlock(CODEC_ZSTD, out.getvalue(), raw_size, np.array([0, raw_size], dtype="<u4"))


def write_dataset(folder: str, blocks: list[SealedBlock], schema: dict) -> None:
    """A one-shard dataset of ``blocks`` with a consistent manifest."""
    data, info = build_shard("shards/shard-000000.sks", blocks)
    os.makedirs(os.path.join(folder, "shards"), exist_ok=True)
    with open(os.path.join(folder, info.name), "wb") as fh:
        fh.write(data)
    with open(os.path.join(folder, "manifest.json"), "wb") as fh:
        fh.write(Manifest(shards=(info,), schema=schema).to_json())


def run_measured(*args: str, env: dict[str, str] | None = None) -> tuple[int, int, str]:
    """``shardkit *args`` in a subprocess: (exit code, peak RSS in MiB, output)."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, SHARDKIT, *args],
        capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})},
    )
    result = json.loads(done.stdout)
    return result["code"], result["peak_kib"] // 1024, result["out"]
